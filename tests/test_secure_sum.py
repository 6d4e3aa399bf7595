"""The owners' scatters summed by SecAgg+ (redkit/federated/scatter_share.py, secure_sum.py): a scatter as limbs of
whole numbers and back; through Flower's own quantiser and modular sum, the owners' limbs give the plain sum bit for
bit (also where an owner's scatter is one grid step off symmetric, as BLAS leaves some); what a withheld scatter
means for the router and for the server's checks. The whole protocol over Flower is tested in test_federated.py."""

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.common.secure_aggregation.quantization import dequantize, quantize  # noqa: E402

from redkit.errors import RedkitError  # noqa: E402
from redkit.federated.scatter_share import HALF, LIMB_BITS, from_limbs, limbs  # noqa: E402
from redkit.incremental.statistics import GRID, on_grid  # noqa: E402
from redkit.routers.gaussian import DomainStatistics, DomainStatisticsConfig  # noqa: E402


def _scatter(seed: int, width: int = 24, scale: float = 30.0) -> torch.Tensor:
    x = torch.randn(40, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale
    return on_grid(x.T @ x)


def _through_secagg(shares: list[list[np.ndarray]]) -> list[np.ndarray]:
    """What SecAggPlusWorkflow hands its strategy for these limbs (masks cancel; its quantiser, modular sum,
    dequantiser, offset and division by the owners' count, as flwr 1.42 computes them), times the count."""
    n = len(shares)
    quantised = [quantize(limb_list, float(HALF), 2 * HALF) for limb_list in shares]
    summed = [sum(q[i].astype(np.int64) for q in quantised) % (1 << 32) for i in range(len(shares[0]))]
    out = dequantize(summed, float(HALF), 2 * HALF)
    for vector in out:
        vector += -(n - 1) * HALF
        vector *= 1 / n
    return [np.rint(vector * n) for vector in out]


def test_a_scatter_goes_as_limbs_and_comes_back_bit_for_bit():
    scatter = _scatter(0)
    scatter[3, 5] += GRID  # a product's summing order can leave an entry one step off its mirror
    parts = limbs(scatter)
    assert len(parts) == 3 and all(p.shape == (24 * 25 // 2,) for p in parts)
    assert all(np.abs(p).max() <= HALF and np.array_equal(p, np.rint(p)) for p in parts)
    assert torch.equal(from_limbs(*parts, 24), scatter)


def test_owners_limbs_summed_as_secagg_does_give_the_plain_sum_exactly():
    scatters = [_scatter(seed, scale=10.0 * (seed + 1)) for seed in range(5)]
    scatters[2][7, 1] -= GRID
    plain = torch.zeros_like(scatters[0])
    for s in scatters:
        plain += s
    assert float(plain.abs().max()) / GRID > 1 << LIMB_BITS  # the high limbs carry something
    assert torch.equal(from_limbs(*_through_secagg([limbs(s) for s in scatters]), 24), plain)


def test_entries_beyond_two_limbs_are_refused():
    scatter = torch.zeros(3, 3, dtype=torch.float64)
    scatter[0, 0] = (HALF << LIMB_BITS) * GRID
    with pytest.raises(RedkitError, match="too large to send as limbs"):
        limbs(scatter)


def test_a_withheld_scatter_keeps_counts_and_means_and_counts_as_zero():
    module = DomainStatistics(DomainStatisticsConfig(dim=4, width=0, seed=0, labels=("a/0", "a/1")))
    module.counts.copy_(torch.tensor([3.0, 5.0]))
    module.means.copy_(torch.arange(8.0).reshape(2, 4))
    module.scatter.copy_(torch.eye(4, dtype=torch.float64))
    withheld = module.withholding()
    assert withheld.config.withheld and withheld.scatter.shape == (0, 0)
    assert set(withheld.state_dict()) == {"counts", "means", "scatter"}
    stats = withheld.statistics()
    assert torch.equal(stats.counts, module.counts) and torch.equal(stats.means, module.means)
    assert torch.equal(stats.scatter, torch.zeros(4, 4, dtype=torch.float64))


def test_a_sum_that_is_not_a_scatter_is_refused_whole():
    """A forged share shows only in the sum: one that is not a scatter (here indefinite) is refused in one line,
    whoever sent it (the server cannot tell)."""
    from pathlib import Path

    from redkit.federated.assemble import Accepted, summed_module
    from redkit.federated.plan import FederationPlan

    plan = FederationPlan(router_options={"width": 64, "seed": 0})
    accepted = [Accepted(o, Path(o), {"dim": 384, "domains": [o]}) for o in ("a", "b")]
    forged = on_grid(torch.eye(64, dtype=torch.float64))
    forged[0, 0] = -1.0
    with pytest.raises(RedkitError, match="not positive semi-definite") as err:
        summed_module(plan, accepted, forged)
    assert "\n" not in str(err.value)
    module = summed_module(plan, accepted, on_grid(torch.eye(64, dtype=torch.float64)))
    assert module.config.domains == ("a", "b") and module.config.dim == 384
