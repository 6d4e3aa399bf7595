"""Fed3R (Fanì et al., ICML 2024): a ridge regression onto one-hot targets, solved from the owners' summed Gram
matrices; on the frozen features, on random Fourier features (the paper's Fed3R-RF), or on RED's random ReLU
features (not in the paper)."""

from dataclasses import dataclass

import torch

from redkit.errors import RedkitError
from redkit.federated.oneshot.base import ONESHOT, OneShotClassifier, OneShotMethod, Upload, solve
from redkit.federated.oneshot.maps import FeatureMap, FourierFeatures, ReLUFeatures
from redkit.incremental.projection import WIDTH
from redkit.incremental.ridge import RIDGE


@dataclass
class MergedRidge:
    labels: tuple[str, ...]  # (C,)
    gram: torch.Tensor  # (D', D') Σ_k G_k
    sums: torch.Tensor  # (C, D') Σ_k B_kᵀ


@ONESHOT.register("fed3r")
class Fed3R(OneShotMethod):
    """Fanì et al. 2024: ridge regression onto one-hot targets from the owners' summed G = ΦᵀΦ and B = ΦᵀY."""

    name = "fed3r"
    wire = torch.float64
    arrays = ("G", "class_sums")
    server_defaults = {"ridge": RIDGE, "normalize": True}  # ρ: λ = ρ tr(G) / D'; the authors normalise W

    def feature_map(self) -> FeatureMap:
        return FeatureMap(self.dim, bias=True)

    def __init__(self, dim, wire=None, **plan):
        super().__init__(dim, wire, **plan)
        self.map = self.feature_map()

    def compute(self, h, y, labels):
        missing = (torch.bincount(y, minlength=len(labels)) == 0).nonzero().flatten().tolist()
        if missing:
            raise RedkitError(f"no example of class {labels[missing[0]]!r} among the owner's data")
        phi = self.map(h)  # (N, D')
        sums = torch.zeros(len(labels), phi.shape[1], dtype=torch.float64).index_add_(0, y, phi)  # (C_k, D')
        return Upload(labels, {"G": phi.T @ phi, "class_sums": sums})

    def expected_shapes(self, rows):
        width = self.map.out_dim
        return {"G": (width, width), "class_sums": (rows, width)}

    def aggregate(self, uploads) -> MergedRidge:
        gram, sums = None, {}
        for owner, upload in uploads:
            self.check(upload, owner)
            g = upload.arrays["G"].double()
            gram = g.clone() if gram is None else gram.add_(g)
            for label, row in zip(upload.classes, upload.arrays["class_sums"].double()):
                sums[label] = row.clone() if label not in sums else sums[label] + row
        if gram is None:
            raise RedkitError(f"{self.name}: no owner's upload to merge")
        return MergedRidge(tuple(sums), gram, torch.stack(list(sums.values())))

    def classifier(self, merged: MergedRidge, **options) -> OneShotClassifier:
        options = self.server_options(options)
        width = len(merged.gram)
        ridge = float(options["ridge"]) * float(torch.trace(merged.gram)) / width  # λ
        system = merged.gram.clone()
        system.diagonal().add_(ridge)
        solution = solve(system, merged.sums.T)  # (D', C)
        weight, bias = (solution[:-1], solution[-1]) if self.map.bias else (solution, None)
        if options["normalize"]:  # src/fed3r.py normalize_W: each class's weights to unit norm, its bias alike
            norm = weight.norm(dim=0)
            norm = torch.where(norm == 0, torch.full_like(norm, 1e-6), norm)
            weight = weight / norm
            bias = None if bias is None else bias / norm
        # the bias column's weight is the classifier's bias: its map leaves the column out
        return OneShotClassifier(
            merged.labels, self.map.without_bias(), weight.T.contiguous(), bias, details={"lambda": ridge}
        )


@ONESHOT.register("fed3r-rf")
class Fed3RFourier(Fed3R):
    """Fed3R on random Fourier features (the paper's Fed3R-RF)."""

    name = "fed3r-rf"
    plan_defaults = {"width": 2048, "sigma": 8.0, "seed": 0}

    def feature_map(self):
        s = self.settings
        return FourierFeatures(self.dim, int(s["width"]), float(s["sigma"]), int(s["seed"]), bias=True)


@ONESHOT.register("fed3r-relu")
class Fed3RReLU(Fed3R):
    """Fed3R on RED's random ReLU features (not in the paper: the features RED's statistics are of)."""

    name = "fed3r-relu"
    plan_defaults = {"width": WIDTH, "seed": 0}

    def feature_map(self):
        return ReLUFeatures(self.dim, int(self.settings["width"]), int(self.settings["seed"]), bias=True)
