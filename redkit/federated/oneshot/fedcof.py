"""FedCOF (Goswami et al., NeurIPS 2025): each class's covariance estimated from the spread of its owners' class
means (the package's docstring gives the equations and where this departs from the authors' code)."""

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.federated.oneshot.base import ONESHOT, OneShotClassifier, OneShotMethod, Upload, solve
from redkit.federated.oneshot.maps import FeatureMap
from redkit.federated.oneshot.means import class_means, merge_means, pooled_mean


def fedcof_covariance(counts: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """FedCOF's estimate of one class's covariance from the K means (K, d) and counts (K,) of its owners (or parts):
    Σ_k n_k (μ_k - μ)(μ_k - μ)ᵀ / (K - 1), μ the pooled mean; / K when K = 1 (a zero matrix), as
    federate_classes.py (FedCOFServer.aggregate) divides. (d, d) float64."""
    centred = (means - pooled_mean(counts, means)) * counts.sqrt()[:, None]  # (K, d)
    return centred.T @ centred / max(len(counts) - 1, 1)


@dataclass
class MergedCOF:
    labels: tuple[str, ...]  # (C,)
    counts: torch.Tensor  # (C,) n_c
    sums: torch.Tensor  # (C, d) n_c μ_c: B's columns
    within: torch.Tensor  # (d, d) Σ_c (n_c - 1) Σ̂_c
    clients: torch.Tensor  # (C,) K_c: the means each class's estimate had


@ONESHOT.register("fedcof")
class FedCOF(OneShotMethod):
    """Goswami et al. 2025: class covariances estimated from the spread of the owners' class means."""

    name = "fedcof"
    arrays = ("counts", "means")
    plan_defaults = {"subsets": 1, "seed": 0}  # subsets 1: the authors' training-free code
    server_defaults = {"shrink": 1.0}  # γ (the authors: 1 for ViT-B, 0.1 for MobileNet and SqueezeNet)

    def compute(self, h, y, labels):
        subsets = int(self.settings["subsets"])
        if subsets < 1:
            raise RedkitError(f"fedcof: subsets {subsets}: at least 1")
        if subsets == 1:
            counts, means = class_means(h, y, labels)
            return Upload(labels, {"counts": counts, "means": means})
        generator = torch.Generator().manual_seed(int(self.settings["seed"]))
        classes, counts, means = [], [], []
        for c, label in enumerate(labels):
            rows = (y == c).nonzero().flatten()
            if len(rows) == 0:
                raise RedkitError(f"no example of class {label!r} among the owner's data")
            parts = [rows]
            if len(rows) >= 4:  # Init_FT_LP/sync_trainer_round.py, cp_init
                count = min(subsets, len(rows) // 2)
                size = len(rows) // count
                shuffled = rows[torch.randperm(len(rows), generator=generator)]
                parts = [shuffled[i * size : (i + 1) * size] for i in range(count - 1)] + [
                    shuffled[(count - 1) * size :]
                ]
            for part in parts:
                classes.append(label)
                counts.append(float(len(part)))
                means.append(h[part].mean(dim=0))
        return Upload(
            tuple(classes), {"counts": torch.tensor(counts, dtype=torch.float64), "means": torch.stack(means)}
        )

    def expected_shapes(self, rows):
        return {"counts": (rows,), "means": (rows, self.dim)}

    def plan_bytes(self) -> int:  # one mean per class needs no plan
        return super().plan_bytes() if int(self.settings["subsets"]) > 1 else 0

    def aggregate(self, uploads) -> MergedCOF:
        merged = merge_means(self, uploads)
        within = torch.zeros(self.dim, self.dim, dtype=torch.float64)
        counts, sums, clients = [], [], []
        for n_k, mu_k in zip(merged.counts, merged.means):
            n = n_k.sum()
            within += (n - 1) * fedcof_covariance(n_k, mu_k)
            counts.append(n)
            sums.append(n * pooled_mean(n_k, mu_k))
            clients.append(float(len(n_k)))
        return MergedCOF(merged.labels, torch.stack(counts), torch.stack(sums), within, torch.tensor(clients))

    def classifier(self, merged: MergedCOF, **options) -> OneShotClassifier:
        shrink = float(self.server_options(options)["shrink"])
        total = merged.counts.sum()
        mean = merged.sums.sum(dim=0) / total  # (d,) ḡ
        gram = merged.within + torch.outer(mean, mean) * total  # (d, d)
        gram.diagonal().add_(shrink * float((merged.counts - 1).sum()))  # Σ_c (n_c - 1) γ I
        weight = solve(gram, merged.sums.T).T  # (C, d)
        details = {"classes_with_one_mean": int((merged.clients == 1).sum()), "means": int(merged.clients.sum())}
        features = FeatureMap(self.dim, bias=False)
        return OneShotClassifier(merged.labels, features, F.normalize(weight, dim=1), None, details=details)
