"""One-shot federated baselines built for frozen pretrained models: each owner computes a few statistics of its
own features once, sends them, and the server builds a classifier from them in closed form. One round, nothing
trained by gradient, nothing sent back to the owners but (for two methods) the plan they compute under.

    method      paper (authors' code)                                  each owner sends (C_k its classes)   wire
    fedncm      Legate et al., "Guiding the last layer in federated    counts (C_k,), means (C_k, d)        float32
                learning with pre-trained models", NeurIPS 2023
                (github.com/GwenLegate/GuidingLastLayerFLPretrain)
    fed3r       Fanì et al., "Accelerating heterogeneous federated     G (d+1, d+1), class_sums (C_k, d+1)   float64
                learning with closed-form classifiers", ICML 2024
                (github.com/Erosinho13/Fed3R, src/fed3r.py)
    fed3r-rf    the same paper's Fed3R-RF: random Fourier features     G (D+1, D+1), class_sums (C_k, D+1)   float64
    fed3r-relu  not in the paper: Fed3R on the random ReLU features    G (M+1, M+1), class_sums (C_k, M+1)   float64
                RED's router reads (projection.py, M = 2,048)
    fedcof      Goswami et al., "Covariances for free: exploiting      counts (R,), means (R, d)             float32
                mean distributions for training-free federated         R = C_k (subsets 1, the authors'
                learning", NeurIPS 2025 (github.com/dipamgoswami/      training-free code) or up to
                FedCOF: federate_classes.py; Init_FT_LP/ for subsets)  subsets x C_k (Init_FT_LP's --subsets)

d = 384 (all-MiniLM-L6-v2's mean-pooled features), D the random Fourier width, M the ReLU width. Every upload also
names its classes (`Upload.classes`: the class of each row of its per-class arrays), strings every method sends
alike; `upload_bytes` counts the float arrays only.

The classifiers (h: (N, d) a query's frozen features, φ the method's feature map, [φ, 1] with the bias column):

    fedncm      scores = cos(h, μ_c), μ_c = Σ_k n_ck μ_ck / n_c                        (the authors: the weight rows
                are the normalised class means, h · μ_c/|μ_c|: the same argmax)
    fed3r*      A = Σ_k G_k + λ I,  B = Σ_k B_k (D', C),  W = A⁻¹ B;  bias = W's last row, w_c = W[:-1, c]:
                scores_c = (φ(h) · w_c + bias_c) / |w_c|                             (src/fed3r.py: calc_ridge_params,
                normalize_W; λ also on the bias, as there)
    fedcof      per class c, from the K_c means μ_ck (counts n_ck) its owners sent:
                    Σ̂_c = Σ_k n_ck (μ_ck - μ_c)(μ_ck - μ_c)ᵀ / (K_c - 1)   (/ K_c when K_c = 1: then Σ̂_c = 0)
                    G_est = Σ_c (n_c - 1)(Σ̂_c + γ I) + N ḡ ḡᵀ,    ḡ = Σ_c n_c μ_c / N
                    (the within-class part only: the between-class scatter Σ n_c (μ_c - ḡ)(μ_c - ḡ)ᵀ is left out, as
                    the paper and federate_classes.py do),  W = G_est⁻¹ B (B column c = n_c μ_c),
                scores_c = h · w_c / |w_c|                                           (FedCOFServer.aggregate)

Σ̂_c is unbiased (E Σ̂_c = Σ_c) when a class's examples are i.i.d. across its owners: Cov(μ_ck) = Σ_c / n_ck.

What departs from the authors' code, and why:
- One class, one owner (CLINC150 split by domain): FedCOF's estimator has nothing to estimate from. The authors'
  training-free code divides the (zero) spread by K_c = 1 instead of K_c - 1, so every class's covariance is its
  shrinkage γ I alone and G_est = γ (N - C) I + N ḡ ḡᵀ: W's columns are the class sums with the direction of the
  global mean ḡ partly projected out (by Sherman-Morrison, w_c ∝ (I - β ḡ ḡᵀ) μ_c, β = N / (γ (N - C) + N |ḡ|²)),
  then normalised: FedNCM's dot-product classifier less a share of ḡ that γ sets. That is what `fedcof` runs here,
  faithfully. The authors' Init_FT_LP code (FedCOF followed by fine-tuning) replaces a class seen in one mean by
  the covariance of that mean and five noisy copies (σ² = 0.01) instead; that is not the training-free method the
  paper's tables use, and it is not run here.
- `subsets` > 1 is the authors' Init_FT_LP option (sync_trainer_round.py, cp_init): each owner splits each of its
  classes with at least 4 examples at random into min(subsets, ⌊n/2⌋) parts (the last part takes the remainder)
  and sends one count and mean per part, which the server treats as further clients. It gives the estimator
  something to work with when few owners hold a class, at subsets x FedNCM's bytes; it is a departure from the
  training-free code (root federate_classes.py), and at subsets = n the owner would be sending its features.
  Here the split is drawn from the plan's seed (the authors': torch's global generator), and the server is
  federate_classes.py's (Init_FT_LP adds γ I to G_est once more: (N - C) times smaller than the γ term already in
  it).
- Fed3R-RF's random Fourier features are Rahimi and Recht's, φ(h) = √(2/D) cos(h Ω + b), Ω (d, D) ~ N(0, σ⁻²),
  b ~ U[0, 2π), drawn from the plan's seed (the paper's RF variant; the released code has none, so the bias column
  and the column normalisation of plain Fed3R are kept for it). σ and D are the plan the server sends.
- λ is written relative to the mean eigenvalue of ΣG, λ = ρ tr(ΣG) / D' (ridge.py's convention), so one grid of ρ
  serves every feature map; the classifier at a given λ is the authors' (the absolute λ is in `details`).
- Everything is solved in float64 (Cholesky, LU where it fails), where the authors solve in float32 (Fed3R:
  torch.linalg.solve; FedCOF: pinv, the same inverse for the positive definite G_est here).
- Wire types: Fed3R's G is summed over owners and then solved at a small λ, so it is sent in float64 (float32
  counted beside it by the experiment); FedNCM's and FedCOF's means in float32 as the authors' features are, counts
  in the same type (integers, exact in float32 to 2²⁴).

The registry (`ONESHOT`) holds each method's class; `ONESHOT[name](dim, **plan)` is one run's method, whose
`upload(h, y, labels)` is what an owner runs on its own features and `server(uploads, **options)` what the server
runs on the uploads received (checked: a malformed upload is refused in one line).
"""

import copy
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.incremental.projection import WIDTH, ProjectionConfig, RandomProjection
from redkit.incremental.ridge import RIDGE
from redkit.incremental.statistics import ClassStatistics
from redkit.registry import Registry

BATCH = 2048  # queries scored at once: an (N, D') float64 block


@dataclass(frozen=True)
class Upload:
    """What one owner sends: the class of each row of its per-class arrays, and named float arrays."""

    classes: tuple[str, ...]  # (R,) a class may have several rows (fedcof with subsets > 1)
    arrays: dict[str, torch.Tensor] = field(default_factory=dict)


def upload_bytes(upload: Upload) -> int:
    """Bytes of the float arrays an owner sends, in the type they are sent in (the class names not counted)."""
    return sum(t.numel() * t.element_size() for t in upload.arrays.values())


def as_wire(upload: Upload, dtype: torch.dtype) -> Upload:
    """The same upload with its arrays in `dtype` (what a float32 or float64 wire carries)."""
    return Upload(upload.classes, {name: t.to(dtype) for name, t in upload.arrays.items()})


# ---------------------------------------------------------------------------------------------------------- maps


class FeatureMap:
    """(N, d) frozen features -> (N, D') what a method's statistics are of, float64; [φ, 1] with `bias`."""

    def __init__(self, dim: int, bias: bool):
        self.dim, self.bias = dim, bias

    @property
    def width(self) -> int:  # D' without the bias column
        return self.dim

    @property
    def out_dim(self) -> int:
        return self.width + int(self.bias)

    def map(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) float64 -> (N, width)
        return h

    def without_bias(self) -> "FeatureMap":
        other = copy.copy(self)
        other.bias = False
        return other

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if h.dim() != 2 or h.shape[1] != self.dim:
            raise RedkitError(f"features of shape {tuple(h.shape)}: expected (N, {self.dim})")
        phi = self.map(h.double())
        return torch.cat([phi, torch.ones(len(phi), 1, dtype=phi.dtype)], dim=1) if self.bias else phi


class FourierFeatures(FeatureMap):
    """Rahimi and Recht's random Fourier features of the Gaussian kernel exp(-|h - h'|² / 2σ²):
    φ(h) = √(2/D) cos(h Ω + b), Ω (d, D) ~ N(0, σ⁻²), b (D,) ~ U[0, 2π), from `seed` (regenerated by everyone)."""

    def __init__(self, dim: int, width: int, sigma: float, seed: int, bias: bool = True):
        super().__init__(dim, bias)
        generator = torch.Generator().manual_seed(seed)
        self.omega = torch.randn(dim, width, generator=generator, dtype=torch.float64) / sigma  # (d, D)
        self.phase = torch.rand(width, generator=generator, dtype=torch.float64) * 2 * math.pi  # (D,)

    @property
    def width(self) -> int:
        return self.omega.shape[1]

    def map(self, h: torch.Tensor) -> torch.Tensor:
        return math.sqrt(2.0 / self.width) * torch.cos(h @ self.omega + self.phase)


class ReLUFeatures(FeatureMap):
    """RED's routing features (redkit/incremental/projection.py): φ(h) = ReLU(h P), P (d, M) ~ N(0, 1) from `seed`."""

    def __init__(self, dim: int, width: int, seed: int, bias: bool = True):
        super().__init__(dim, bias)
        self.projection = RandomProjection(ProjectionConfig(dim, width, seed))

    @property
    def width(self) -> int:
        return self.projection.out_dim

    def map(self, h: torch.Tensor) -> torch.Tensor:
        return self.projection(h)


# ---------------------------------------------------------------------------------------------------- classifier


@dataclass
class OneShotClassifier:
    """Class scores of query features: (φ(h) or h/|h|) Wᵀ + bias."""

    labels: tuple[str, ...]  # (C,) the classes, in the order of the score columns
    feature_map: FeatureMap  # (N, d) -> (N, D')
    weight: torch.Tensor  # (C, D') float64
    bias: torch.Tensor | None = None  # (C,) float64
    normalize_queries: bool = False  # cosine scores (FedNCM)
    details: dict = field(default_factory=dict)  # what the server chose or found (absolute λ, ...)

    @torch.no_grad()
    def scores(self, h: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, C) float64, by blocks of BATCH queries."""
        blocks = []
        for rows in h.split(BATCH):
            phi = self.feature_map(rows)  # (n, D')
            if self.normalize_queries:
                phi = F.normalize(phi, dim=1)
            out = phi @ self.weight.T  # (n, C)
            blocks.append(out if self.bias is None else out + self.bias)
        return torch.cat(blocks)

    def predict(self, h: torch.Tensor) -> list[str]:
        return [self.labels[i] for i in self.scores(h).argmax(dim=1).tolist()]

    def accuracy(self, h: torch.Tensor, truth: list[str]) -> float:
        """The share of queries whose top class is `truth`'s (N,)."""
        index = {label: i for i, label in enumerate(self.labels)}
        target = torch.tensor([index.get(label, -1) for label in truth])
        return float((self.scores(h).argmax(dim=1) == target).double().mean())

    def nbytes(self) -> int:
        """The classifier's float64 parameters (a feature map's random weights are regenerated from the plan)."""
        return self.weight.numel() * 8 + (0 if self.bias is None else self.bias.numel() * 8)


# ------------------------------------------------------------------------------------------------------- methods

ONESHOT: Registry[type["OneShotMethod"]] = Registry("one-shot method")


class OneShotMethod:
    """One method under one plan. `upload` runs on an owner, `server` on the server; `plan_defaults` are the
    settings the owners compute under (sent to them before the round), `server_defaults` the server's alone."""

    name = ""
    wire = torch.float32  # the type the owners send their arrays in
    arrays: tuple[str, ...] = ()  # the names of the arrays an upload holds
    plan_defaults: dict = {}
    server_defaults: dict = {}

    def __init__(self, dim: int, wire: torch.dtype | None = None, **plan):
        unknown = sorted(set(plan) - set(self.plan_defaults))
        if unknown:
            raise RedkitError(f"{self.name}: unknown plan setting {unknown[0]!r} (known: {list(self.plan_defaults)})")
        self.dim = dim
        self.wire = wire or type(self).wire
        self.settings = self.plan_defaults | plan

    def plan(self) -> dict:
        return dict(self.settings)

    def plan_bytes(self) -> int:
        """Server -> owner bytes beyond the backbone every method shares: the plan as JSON, 0 when it is empty."""
        return len(json.dumps(self.plan(), sort_keys=True).encode()) if self.settings else 0

    # owner ---------------------------------------------------------------------------------------------------
    def upload(self, h: torch.Tensor, y: torch.Tensor, labels: tuple[str, ...]) -> Upload:
        """An owner's upload from its features h (N, d) and classes y (N,) indexing `labels` (every one present)."""
        if h.dim() != 2 or h.shape[1] != self.dim:
            raise RedkitError(f"{self.name}: features of shape {tuple(h.shape)}, the plan's are (N, {self.dim})")
        upload = self.compute(h.double(), y, tuple(labels))
        return as_wire(upload, self.wire)

    def compute(self, h: torch.Tensor, y: torch.Tensor, labels: tuple[str, ...]) -> Upload:
        raise NotImplementedError

    # server --------------------------------------------------------------------------------------------------
    def expected_shapes(self, rows: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def check(self, upload: Upload, owner: str) -> None:
        """Refuses (one line) an upload whose arrays are not this method's, or not of the plan's shapes."""
        where = f"{self.name}: owner {owner!r}"
        if set(upload.arrays) != set(self.arrays):
            raise RedkitError(f"{where} sent arrays {sorted(upload.arrays)}, expected {sorted(self.arrays)}")
        if not upload.classes:
            raise RedkitError(f"{where} sent no class")
        for name, shape in self.expected_shapes(len(upload.classes)).items():
            t = upload.arrays[name]
            if not t.is_floating_point():
                raise RedkitError(f"{where}: {name} is {t.dtype}, not a float array")
            if tuple(t.shape) != shape:
                raise RedkitError(f"{where}: {name} of shape {tuple(t.shape)}, expected {shape} under this plan")
            if not torch.isfinite(t).all():
                raise RedkitError(f"{where}: {name} holds a value that is not finite")
        counts = upload.arrays.get("counts")
        if counts is not None and ((counts < 1).any() or (counts != counts.round()).any()):
            raise RedkitError(f"{where}: counts must be positive whole numbers")

    def aggregate(self, uploads: Iterable[tuple[str, Upload]]):
        """The uploads merged (each checked), in the order given."""
        raise NotImplementedError

    def classifier(self, merged, **options) -> OneShotClassifier:
        raise NotImplementedError

    def server(self, uploads: dict[str, Upload], **options) -> OneShotClassifier:
        """The classifier from every owner's upload, owners taken in the order of their names."""
        return self.classifier(self.aggregate((name, uploads[name]) for name in sorted(uploads)), **options)

    def server_options(self, options: dict) -> dict:
        unknown = sorted(set(options) - set(self.server_defaults))
        if unknown:
            raise RedkitError(f"{self.name}: unknown option {unknown[0]!r} (known: {list(self.server_defaults)})")
        return self.server_defaults | options


def class_means(h: torch.Tensor, y: torch.Tensor, labels: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts (C_k,), means (C_k, d)) float64 of an owner's classes (statistics.py's; its scatter is not sent)."""
    stats = ClassStatistics.of(h, y, labels)
    return stats.counts, stats.means


@dataclass
class MergedMeans:
    """Every owner's class rows, grouped by class (classes in order of first arrival)."""

    labels: tuple[str, ...]  # (C,)
    counts: list[torch.Tensor]  # C of (K_c,) float64: the rows' counts
    means: list[torch.Tensor]  # C of (K_c, d) float64


def merge_means(method: OneShotMethod, uploads: Iterable[tuple[str, Upload]]) -> MergedMeans:
    rows: dict[str, tuple[list, list]] = {}
    for owner, upload in uploads:
        method.check(upload, owner)
        counts, means = upload.arrays["counts"].double(), upload.arrays["means"].double()
        for i, label in enumerate(upload.classes):
            kept = rows.setdefault(label, ([], []))
            kept[0].append(counts[i : i + 1])
            kept[1].append(means[i : i + 1])
    if not rows:
        raise RedkitError(f"{method.name}: no owner's upload to merge")
    labels = tuple(rows)
    return MergedMeans(labels, [torch.cat(rows[c][0]) for c in labels], [torch.cat(rows[c][1]) for c in labels])


def pooled_mean(counts: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """(K,), (K, d) -> (d,) the mean of the examples the K means summarise (one mean: itself, bit for bit)."""
    if len(counts) == 1:
        return means[0].clone()
    return (counts[:, None] * means).sum(dim=0) / counts.sum()


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


def solve(system: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """system⁻¹ targets, float64: Cholesky, LU where the factor fails (ridge.py's order)."""
    factor, info = torch.linalg.cholesky_ex(system)
    if info == 0:
        return torch.cholesky_solve(targets, factor)
    return torch.linalg.solve(system, targets)


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
