"""A within-class scatter kept small: its top eigen-directions as a factor of whole numbers, and one floor for the
rest, S ≈ F Fᵀ 2^-2e + σ² I, rebuilt with the same bits on any machine.

An owner's scatter (M, M) float64 is most of what it keeps and sends (33.6 MB of 34.7 at M = 2,048 on CLINC150).
The router reads it only through the shrunk covariance (1 − λ) S/(N − C) + λ tr(S)/(M (N − C)) I (gaussian.py),
which already flattens the small eigen-directions: the top r eigenpairs and the mean of the others carry most of
what it reads. At r = 512 the factor is 2.1 MB (M × r int16).

    factor(S, r) -> ScatterFactor     F = U_r (Λ_r − σ²)^½ 2^e rounded to int16 (e: the largest power of two that
                                      keeps F's entries within ±(2^15 − 1)), σ² = the mean of the other M − r
                                      eigenvalues (so the trace is kept, up to the grid), on the grid
    ScatterFactor.scatter()           F Fᵀ 2^-2e + σ² I on the grid (statistics.py): symmetric bit for bit and
                                      positive semi-definite by construction

Why the bits are the same everywhere: F's entries are whole numbers below 2^15, so each product is below 2^30 and
a sum of r < 2^23 of them below 2^53: float64 holds every partial sum exactly, in whatever order a matrix product
adds them, and scaling by a power of two and rounding to the grid are exact too. The sums of owners' rebuilt
scatters are then exact as every other scatter's (statistics.py).
"""

from dataclasses import dataclass

import torch

from redkit.errors import RedkitError
from redkit.incremental.statistics import GRID, on_grid
from redkit.threads import one_thread

WHOLE = 2**15 - 1  # F's entries: int16
EXPONENTS = range(-60, 61)  # e: 2^-2e stays a normal float64 either way (a scatter entry is at most ~2^29)


@dataclass
class ScatterFactor:
    factor: torch.Tensor  # (M, r) int16: U_r (Λ_r − σ²)^½ 2^e, rounded
    exponent: int  # e
    floor: float  # σ², on the grid

    def scatter(self, where: str = "scatter factor") -> torch.Tensor:
        """(M, M) float64 on the grid; one line naming `where` if e or σ² could not come from `factor`."""
        if self.exponent not in EXPONENTS:
            raise RedkitError(f"{where}: exponent {self.exponent} outside [{EXPONENTS[0]}, {EXPONENTS[-1]}]")
        if not (self.floor >= 0 and self.floor < 2.0**40 and self.floor == round(self.floor / GRID) * GRID):
            raise RedkitError(f"{where}: floor {self.floor!r} is not a non-negative multiple of 2^-24 below 2^40")
        whole = self.factor.double()  # (M, r) whole numbers: the product below is exact (see above)
        scatter = (whole @ whole.T) * 2.0 ** (-2 * self.exponent)
        try:
            return on_grid(scatter + self.floor * torch.eye(len(scatter), dtype=torch.float64))
        except RedkitError as err:  # entries too large to sum exactly: a factor no scatter of φ gives
            raise RedkitError(f"{where}: {err}") from None


def factor(scatter: torch.Tensor, rank: int) -> ScatterFactor:
    """`scatter` (M, M), symmetric positive semi-definite, as its top `rank` eigen-directions and a floor."""
    size = scatter.shape[0]
    if not 0 < rank < size:
        raise RedkitError(f"a scatter factor's rank must be between 1 and {size - 1} (φ's width - 1), not {rank}")
    with one_thread():  # eigh's bits depend on BLAS's threads: every owner, on every path, computes it on one
        values, vectors = torch.linalg.eigh(scatter.double())  # ascending
    kept = values[-rank:]
    floor = max(float(torch.trace(scatter.double()) - kept.sum()) / (size - rank), 0.0)
    floor = round(floor / GRID) * GRID
    scaled = vectors[:, -rank:] * (kept - floor).clamp(min=0).sqrt()  # (M, r)
    largest = float(scaled.abs().max())
    exponent = int(torch.floor(torch.log2(torch.tensor(WHOLE / largest)))) if largest > 0 else 0
    exponent = min(max(exponent, EXPONENTS[0]), EXPONENTS[-1])
    whole = torch.round(scaled * 2.0**exponent).clamp(-WHOLE, WHOLE).to(torch.int16)
    return ScatterFactor(whole, exponent, floor)
