"""Class means and counts: what FedNCM's and FedCOF's owners send, and the server's merge of them by class."""

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from redkit.errors import RedkitError
from redkit.federated.oneshot.base import OneShotMethod, Upload
from redkit.incremental.statistics import ClassStatistics


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
