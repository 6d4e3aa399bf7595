"""FedNCM (Legate et al., NeurIPS 2023): the owners' class means, merged; the nearest by cosine."""

import torch
from torch.nn import functional as F

from redkit.federated.oneshot.base import ONESHOT, OneShotClassifier, OneShotMethod, Upload
from redkit.federated.oneshot.maps import FeatureMap
from redkit.federated.oneshot.means import MergedMeans, class_means, merge_means, pooled_mean


@ONESHOT.register("fedncm")
class FedNCM(OneShotMethod):
    """Legate et al. 2023: class means, the nearest by cosine."""

    name = "fedncm"
    arrays = ("counts", "means")

    def compute(self, h, y, labels):
        counts, means = class_means(h, y, labels)  # (C_k,), (C_k, d)
        return Upload(labels, {"counts": counts, "means": means})

    def expected_shapes(self, rows):
        return {"counts": (rows,), "means": (rows, self.dim)}

    def aggregate(self, uploads):
        return merge_means(self, uploads)

    def classifier(self, merged: MergedMeans, **options) -> OneShotClassifier:
        self.server_options(options)
        means = torch.stack([pooled_mean(n, m) for n, m in zip(merged.counts, merged.means)])  # (C, d)
        return OneShotClassifier(merged.labels, FeatureMap(self.dim, bias=False), F.normalize(means, dim=1), None, True)
