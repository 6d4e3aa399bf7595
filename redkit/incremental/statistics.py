"""What an owner's data says about where its classes sit in feature space, as quantities that add up
exactly across owners: per class a count and a mean, per owner the within-class scatter.

    counts   (C_t,)     examples of each of the owner's classes
    means    (C_t, d)   their mean pooled feature
    scatter  (d, d)     Σ_c Σ_{i in c} (h_i - μ_c)(h_i - μ_c)ᵀ over the owner's examples

Merging owners concatenates their classes and sums their scatters, so the pooled within-class
covariance S / (N - C) of every owner's data is computed without anyone holding another's data
(the quantities FeCAM, RanPAC and SLCA-style methods keep instead of examples), and one running sum is
all a model needs to keep. Floating-point sums depend on their order; these do not: each scatter is
rounded to a grid of 2^-24 (float64, far below its entries' spread), and float64 adds numbers on one grid
exactly while their total stays under 2^53 grid steps (entries under 5e8), so owners merged in any order give
bit-identical statistics, and everything built on them is the same whatever order the owners arrived in.
The merge lays the classes out in the order of the owners' names, for the same reason.
"""

from dataclasses import dataclass

import torch

from redkit.errors import RedkitError


@dataclass
class ClassStatistics:
    labels: tuple[str, ...]  # (C_t,) the classes, in row order
    counts: torch.Tensor  # (C_t,) float64
    means: torch.Tensor  # (C_t, d) float64
    scatter: torch.Tensor  # (d, d) float64

    @classmethod
    def of(cls, h: torch.Tensor, classes: torch.Tensor, labels: tuple[str, ...]) -> "ClassStatistics":
        """From features (N, d) and class indices (N,) into `labels`: every label must have an example."""
        h = h.double()
        counts = torch.bincount(classes, minlength=len(labels)).double()
        if (counts == 0).any():
            missing = [labels[i] for i in (counts == 0).nonzero().flatten().tolist()]
            raise RedkitError(f"no example of class {missing[0]!r} among the owner's data")
        means = torch.zeros(len(labels), h.shape[1], dtype=torch.float64).index_add_(0, classes, h) / counts[:, None]
        centred = h - means[classes]  # (N, d)
        return cls(tuple(labels), counts, means, on_grid(centred.T @ centred))

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    def in_order(self, labels: tuple[str, ...]) -> "ClassStatistics":
        """The same statistics with the classes in the order of `labels` (the same set)."""
        if sorted(labels) != sorted(self.labels):
            raise RedkitError("the classes to order are not these statistics' classes")
        rows = torch.tensor([self.labels.index(label) for label in labels], dtype=torch.long)
        return ClassStatistics(tuple(labels), self.counts[rows], self.means[rows], self.scatter)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.counts, self.means, self.scatter))

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"counts": self.counts, "means": self.means, "scatter": self.scatter}


GRID = 2.0**-24  # a scatter's entries are multiples of it: sums of them are exact (see above)
LIMIT = 2.0**53 * GRID  # the largest total an exact sum can reach


def on_grid(scatter: torch.Tensor) -> torch.Tensor:
    if scatter.abs().max() * 64 >= LIMIT:  # room for 64 owners' sums
        raise RedkitError(f"scatter entries up to {float(scatter.abs().max()):.3g}: too large to sum exactly")
    return torch.round(scatter / GRID) * GRID


def merge(named: dict[str, ClassStatistics]) -> ClassStatistics:
    """Every owner's statistics as one set, owners in the order of their names: the classes one after
    another, the scatters summed (exactly: any order gives the same bits). Two owners may not bring the
    same class (its mean would be ambiguous)."""
    if not named:
        raise RedkitError("no owner's statistics to merge")
    parts = [named[name] for name in sorted(named)]
    labels = tuple(label for part in parts for label in part.labels)
    if len(set(labels)) != len(labels):
        seen, twice = set(), None
        for label in labels:
            twice = label if label in seen else twice
            seen.add(label)
        raise RedkitError(f"class {twice!r} is brought by two owners; each class belongs to one")
    if len({part.dim for part in parts}) != 1:
        raise RedkitError(f"owners' statistics of different widths: {sorted({part.dim for part in parts})}")
    scatter = torch.zeros_like(parts[0].scatter)
    for part in parts:
        scatter += part.scatter
    return ClassStatistics(labels, torch.cat([p.counts for p in parts]), torch.cat([p.means for p in parts]), scatter)
