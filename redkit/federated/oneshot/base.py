"""What one owner sends (`Upload`), the classifier the server builds from the uploads (`OneShotClassifier`), and
the base class of every one-shot method, with their registry (`ONESHOT`)."""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import safetensors.numpy
import torch
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.federated.compact import compact
from redkit.federated.oneshot.maps import FeatureMap
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


def compact_bytes(upload: Upload) -> int:
    """Bytes of the upload as `redkit federate` sends a module file: its arrays in one safetensors file, in its
    exact compact form (redkit/federated/compact.py: a symmetric matrix as its triangle, byte planes deflated), so
    that every method's bytes are counted on the same wire as RED's. Fed3R's G = ΦᵀΦ is symmetric but for the last
    bits a matrix product leaves (RED's scatter is rounded to a grid, which makes it symmetric but for about one
    entry in a million): it is counted as an owner sending G's triangle would send it, its upper triangle mirrored."""
    arrays = {}
    for name, t in upload.arrays.items():
        a = t.detach().contiguous().numpy()
        symmetric = a.ndim == 2 and a.shape[0] == a.shape[1] and np.allclose(a, a.T, rtol=1e-9, atol=0)
        arrays[name] = np.triu(a) + np.triu(a, 1).T if symmetric else a
    return len(compact(safetensors.numpy.save(arrays)))


def as_wire(upload: Upload, dtype: torch.dtype) -> Upload:
    """The same upload with its arrays in `dtype` (what a float32 or float64 wire carries)."""
    return Upload(upload.classes, {name: t.to(dtype) for name, t in upload.arrays.items()})


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


def solve(system: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """system⁻¹ targets, float64: Cholesky, LU where the factor fails (ridge.py's order)."""
    factor, info = torch.linalg.cholesky_ex(system)
    if info == 0:
        return torch.cholesky_solve(targets, factor)
    return torch.linalg.solve(system, targets)
