"""An owner's scatter kept as its top eigen-directions and a floor (redkit/incremental/scatter_factor.py): close to the
scatter where its spectrum falls fast, on the grid, symmetric and positive semi-definite, rebuilt with the same bits
however the product is summed, kept in a statistics module that saves small, and checked where it is loaded."""

import numpy as np
import pytest
import torch

from redkit.errors import RedkitError
from redkit.incremental.projection import ProjectionConfig, RandomProjection
from redkit.incremental.scatter_factor import ScatterFactor, factor
from redkit.incremental.statistics import GRID, ClassStatistics, on_grid
from redkit.modules.store import ModuleMeta, load_module, save_module
from redkit.routers.gaussian import DomainStatistics
from redkit.threads import torch_threads

WIDTH, RANK, DIM = 64, 8, 4


def features(seed: int = 0) -> torch.Tensor:
    """(300, WIDTH): most of the spread in 6 directions, a little everywhere (a within-class scatter's shape)."""
    generator = torch.Generator().manual_seed(seed)
    strong = torch.randn(300, 6, generator=generator, dtype=torch.float64) @ torch.randn(
        6, WIDTH, generator=generator, dtype=torch.float64
    )
    return strong + 0.05 * torch.randn(300, WIDTH, generator=generator, dtype=torch.float64)


def scatter_of(h: torch.Tensor) -> torch.Tensor:
    centred = h - h.mean(dim=0)
    return on_grid(centred.T @ centred)


def test_a_factor_rebuilds_a_fast_falling_spectrum_closely_on_the_grid_and_keeps_the_trace():
    scatter = scatter_of(features())
    rebuilt = factor(scatter, RANK).scatter()
    assert torch.equal(rebuilt, rebuilt.T)  # bit for bit: F Fᵀ is exact
    assert torch.equal(rebuilt, torch.round(rebuilt / GRID) * GRID)
    assert float(torch.linalg.eigvalsh(rebuilt).min()) > -1e-9
    assert float((rebuilt - scatter).norm() / scatter.norm()) < 0.01
    assert abs(float(torch.trace(rebuilt) - torch.trace(scatter))) < 1e-3 * float(torch.trace(scatter))
    # one direction is not enough for six: the error is far larger, so the check above can fail
    assert float((factor(scatter, 1).scatter() - scatter).norm() / scatter.norm()) > 0.1


def test_a_factor_is_rebuilt_with_the_same_bits_whatever_sums_the_product():
    kept = factor(scatter_of(features(1)), RANK)
    with torch_threads(1):
        one = kept.scatter()
    with torch_threads(2):
        two = kept.scatter()
    whole = kept.factor.numpy().astype(np.float64)
    by_numpy = on_grid(torch.from_numpy(whole @ whole.T) * 2.0 ** (-2 * kept.exponent) + kept.floor * torch.eye(WIDTH))
    assert torch.equal(one, two) and torch.equal(one, by_numpy)
    assert kept.factor.dtype == torch.int16 and int(kept.factor.abs().max()) > 2**14  # the scale uses int16's range


def test_a_statistics_module_at_a_rank_saves_small_loads_back_and_refuses_a_forged_factor(tmp_path):
    h, classes = features(2), torch.arange(300) % 3
    stats = ClassStatistics.of(h, classes, ("d/0", "d/1", "d/2"))
    projection = RandomProjection(ProjectionConfig(DIM, WIDTH, 0))
    sizes = {}
    for rank in (0, RANK):
        module = DomainStatistics.of(stats, projection, DIM, rank)
        save_module(tmp_path / str(rank), module, ModuleMeta("statistics", vars(module.config), "f" * 16))
        loaded, _ = load_module(tmp_path / str(rank))
        assert torch.equal(loaded.statistics().scatter, module.statistics().scatter)
        assert torch.equal(loaded.statistics().means, stats.means)
        sizes[rank] = (tmp_path / str(rank) / "model.safetensors").stat().st_size
    assert sizes[RANK] < sizes[0] / 3  # 64 × 8 int16 against 64 × 64 float64
    assert torch.equal(module.statistics().scatter, factor(stats.scatter, RANK).scatter())
    assert module.withholding().config.rank == 0  # a withheld scatter has no factor either

    loaded.exponent.fill_(1000)
    with pytest.raises(RedkitError, match="^here: exponent 1000 outside"):
        loaded.full_scatter("here")
    with pytest.raises(RedkitError, match="^here: scatter entries up to .* too large to sum exactly$"):
        ScatterFactor(loaded.factor, -60, 0.0).scatter("here")
    with pytest.raises(RedkitError, match="^here: floor nan is not"):
        ScatterFactor(loaded.factor, 0, float("nan")).scatter("here")
    with pytest.raises(RedkitError, match="rank must be between 1 and 63"):
        factor(stats.scatter, WIDTH)
