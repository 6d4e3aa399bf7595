"""The toy addition grid of the toy experiments: inputs x = (a/100, b/100), target y = (a+b)/200.

The whole input space is only the 100 x 100 integer pairs, so there is nothing to sample: an
expert trains on *every* pair of its domain D_i = [L_i, U_i]^2 and evaluation runs on *every*
pair there is. The numbers therefore carry no sampling noise, only optimisation noise (the seed).

Evaluation columns: one per interval (pairs with both operands in it: the expert domains), then
"off-diagonal" (pairs whose operands lie in different intervals: no expert ever saw them) and
"all" (the full grid).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

INTERVALS: tuple[tuple[int, int], ...] = ((1, 20), (21, 40), (41, 60), (61, 80), (81, 100))
MAX_OPERAND = 100
OFF_DIAGONAL = "off-diagonal"
ALL = "all"


def interval_name(interval: tuple[int, int]) -> str:
    lo, hi = interval
    return f"{lo}-{hi}"


COLUMNS: tuple[str, ...] = (*map(interval_name, INTERVALS), OFF_DIAGONAL, ALL)


@dataclass(frozen=True)
class Grid:
    """A set of operand pairs; `x` and `y` are what a toy model sees and must predict."""

    a: Tensor  # (N,) int64, 1..100
    b: Tensor  # (N,) int64, 1..100

    @property
    def x(self) -> Tensor:  # (N, 2) float32
        return torch.stack([self.a, self.b], dim=1).float() / MAX_OPERAND

    @property
    def y(self) -> Tensor:  # (N, 1) float32
        return (self.a + self.b).float().unsqueeze(1) / (2 * MAX_OPERAND)

    def in_interval(self, interval: tuple[int, int]) -> Tensor:  # (N,) bool
        lo, hi = interval
        return (self.a >= lo) & (self.a <= hi) & (self.b >= lo) & (self.b <= hi)

    def in_any_interval(self) -> Tensor:  # (N,) bool: the union of the expert domains
        return torch.stack([self.in_interval(iv) for iv in INTERVALS]).any(dim=0)

    def select(self, mask: Tensor) -> "Grid":
        return Grid(self.a[mask], self.b[mask])


def full_grid() -> Grid:
    """All 10,000 pairs (a, b), a and b in 1..100, a-major."""
    a, b = torch.meshgrid(torch.arange(1, MAX_OPERAND + 1), torch.arange(1, MAX_OPERAND + 1), indexing="ij")
    return Grid(a.flatten(), b.flatten())


def column_masks(grid: Grid) -> dict[str, Tensor]:
    """Which pairs of `grid` each evaluation column averages over; each mask is (N,) bool."""
    masks = {interval_name(iv): grid.in_interval(iv) for iv in INTERVALS}
    masks[OFF_DIAGONAL] = ~grid.in_any_interval()
    masks[ALL] = torch.ones_like(grid.a, dtype=torch.bool)
    return masks


def predicted_sum(y_hat: Tensor) -> Tensor:
    """The integer answer a model's output stands for: round(200 * y_hat). (N, 1) -> (N,) int64."""
    return torch.round(2 * MAX_OPERAND * y_hat.squeeze(1)).long()


def accuracy_by_column(y_hat: Tensor, grid: Grid) -> dict[str, float]:
    """Exact-answer accuracy per column: a prediction is correct iff round(200 y_hat) == a + b."""
    correct = predicted_sum(y_hat) == grid.a + grid.b  # (N,) bool
    return {name: correct[mask].float().mean().item() for name, mask in column_masks(grid).items()}
