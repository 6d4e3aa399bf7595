"""An owner's within-class scatter as whole numbers that Flower's SecAgg+ can add exactly (secure_sum.py).

SecAgg+ adds integers modulo 2^32. A scatter's entries are whole multiples of 2^-24 (redkit/incremental/statistics.py's
grid) below 2^47 of them (on_grid's bound). Each entry v of its upper triangle is sent as two signed limbs of 24
bits, v = low + high · 2^24, both in [-2^23, 2^23], and a third limb says how far the entry below the diagonal is
from it: a scatter XᵀX is symmetric but for the summing order of a matrix product, which leaves about one entry in
a million one grid step off its mirror (CLINC150's "travel" owner has some; the server's checks allow one step,
validate.py). Up to MAX_OWNERS owners' limb sums (each limb shifted into [0, 2^24] by the protocol's quantiser) stay
below 2^32, and from the three limb sums the sum of the owners' scatters comes back exactly: bit for bit the plain
sum, and the router built from it the same.

    withhold_scatters(run)   an owner's statistics modules with their scatters withheld (counts and means only:
                             DomainStatistics.withholding), Σ of those scatters kept in its work directory (SHARE)
    limbs / from_limbs       a scatter to its three limbs ((M(M+1)/2,) each) and back: 1.5 times the scatter's bytes
                             in float64, as the masked vectors are int64
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from redkit.atomic import atomic_path
from redkit.errors import RedkitError
from redkit.incremental.statistics import GRID
from redkit.modules.store import install_module, load_module, save_module
from redkit.routers.gaussian import STATISTICS

SHARE = "scatter-share.safetensors"  # in an owner's work directory: Σ of its domains' scatters, never sent in the clear
LIMB_BITS = 24
HALF = 1 << (LIMB_BITS - 1)  # 2^23: a limb's range is [-HALF, HALF]
MAX_OWNERS = (1 << 32) // (1 << LIMB_BITS) - 1  # 255: their limb sums (each in [0, 2^24]) stay below the modulus


def withhold_scatters(run) -> None:
    """`run`'s statistics modules rewritten with their scatters withheld, Σ of those scatters kept as its SHARE first
    (a crash in between resumes: the share is never computed from withheld modules)."""
    share = Path(run.dir) / SHARE
    paths = [run.module_dir(STATISTICS, domain) for domain in run.space.domains]
    if not share.is_file():
        scatters = []
        for path in paths:
            module, _ = load_module(path)
            if module.config.withheld:
                raise RedkitError(f"{path}: its scatter is withheld already and {share} is missing: train it again")
            scatters.append(module.full_scatter(str(path)))
        with atomic_path(share) as tmp:
            save_file({"scatter": torch.stack(scatters).sum(dim=0)}, str(tmp))  # exact: one grid
    for path in paths:
        module, meta = load_module(path)
        if not module.config.withheld:  # staged, then one rename: never a config of one and weights of the other
            staging = path.parent / f".{path.name}.withheld"
            withheld = module.withholding()
            save_module(staging, withheld, replace(meta, config=vars(withheld.config)))
            install_module(staging, path)


def limbs(scatter: torch.Tensor) -> list[np.ndarray]:
    """(M, M) scatter on the grid -> [low, high, below]: its upper triangle's entries v = low + high · 2^24 in grid
    steps, and the entries below the diagonal minus their mirrors; each (M(M+1)/2,) float64 of whole numbers in
    [-2^23, 2^23]."""
    steps = torch.round(scatter / GRID).to(torch.int64).numpy()
    rows, cols = np.triu_indices(scatter.shape[0])
    v, below = steps[rows, cols], steps[cols, rows] - steps[rows, cols]
    if np.abs(steps).max(initial=0) >= HALF << LIMB_BITS or np.abs(below).max(initial=0) > HALF:
        raise RedkitError(f"scatter entries up to {np.abs(steps).max() * GRID:.3g}: too large to send as limbs")
    low = ((v + HALF) & ((1 << LIMB_BITS) - 1)) - HALF
    high = (v - low) >> LIMB_BITS
    return [low.astype(np.float64), high.astype(np.float64), below.astype(np.float64)]


def from_limbs(low: np.ndarray, high: np.ndarray, below: np.ndarray, width: int) -> torch.Tensor:
    """The (M, M) scatter of limbs' sums (whole numbers): upper triangle low + high · 2^24 grid steps, the entries
    below the diagonal their mirrors plus `below`."""
    v = np.rint(low).astype(np.int64) + (np.rint(high).astype(np.int64) << LIMB_BITS)
    scatter = np.zeros((width, width))
    rows, cols = np.triu_indices(width)
    scatter[rows, cols] = v * GRID  # exact: |v| < 2^53
    scatter[cols, rows] = (v + np.rint(below).astype(np.int64)) * GRID
    return torch.from_numpy(scatter)
