"""Routing metrics against cases computed by hand: balanced, one dead expert, all on one expert;
and the published-code mistakes they must not repeat (|MaxVio|, Gini off by 1/n, top-k entropy)."""

import math
import time

import pytest
import torch
from sklearn.metrics import normalized_mutual_info_score

from redkit.errors import RedkitError
from redkit_experiments.routing.metrics import (
    batch_loads,
    batch_max_vio,
    cv,
    decision_metrics,
    entropy,
    expert_load,
    gini,
    max_vio,
    over_capacity,
    routing_metrics,
    unused_rate,
    z_loss,
)
from redkit_experiments.routing.specialisation import (
    contingency,
    gram,
    intersections,
    jaccard,
    nmi,
    specialisation_metrics,
)
from redkit_experiments.routing.stability import stability_metrics


def _one_hot(experts: list[int], k: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(experts), k).float()


CASES = {  # loads of K = 4 experts -> (CV, MaxVio, Gini, unused, over capacity at c = 1)
    "balanced": ([2, 2, 2, 2], 0.0, 0.0, 0.0, 0.0, 0.0),
    "one_dead": ([0, 4, 4, 4], math.sqrt(3) / 3, 1 / 3, 0.25, 0.25, 3 / 12),  # MaxVio 1/3, not |.| = 1.0
    "all_on_one": ([8, 0, 0, 0], math.sqrt(3), 3.0, 0.75, 0.75, 6 / 8),  # Gini (n-1)/n
}


@pytest.mark.parametrize("case", list(CASES))
def test_load_metrics_by_hand(case):
    loads, want_cv, want_vio, want_gini, want_unused, want_over = CASES[case]
    experts = [i for i, count in enumerate(loads) for _ in range(count)]
    load = expert_load(torch.tensor(experts).unsqueeze(1), 4)
    assert load.tolist() == loads
    assert cv(load) == pytest.approx(want_cv) and max_vio(load) == pytest.approx(want_vio)
    assert gini(load) == pytest.approx(want_gini) and unused_rate(load) == pytest.approx(want_unused)
    assert over_capacity(load, len(experts), 1, 1.0) == pytest.approx(want_over)
    m = routing_metrics(_one_hot(experts, 4), capacity_factor=1.0)
    assert (m["cv"], m["max_vio"], m["gini"]) == pytest.approx((want_cv, want_vio, want_gini))


def test_max_vio_has_no_absolute_value_and_is_per_batch_too():
    selected = torch.tensor([0, 0, 1, 1, 0, 0, 0, 0]).unsqueeze(1)
    loads = batch_loads(selected, 2, 4)
    assert loads.tolist() == [[2, 2], [4, 0]]
    assert batch_max_vio(loads).tolist() == [0.0, 1.0]
    m = routing_metrics(_one_hot(selected.squeeze(1).tolist(), 2), batch_size=4)
    assert m["max_vio_batch_mean"] == pytest.approx(0.5) and m["max_vio_batch_max"] == pytest.approx(1.0)
    assert m["max_vio"] == pytest.approx((6 - 4) / 4)


def test_topk_loads_count_every_selected_expert():
    alpha = torch.tensor([[0.6, 0.3, 0.1, 0.0], [0.5, 0.0, 0.4, 0.1]])
    m = routing_metrics(alpha, k=2)
    assert m["load_top1"] == [2, 0, 0, 0] and m["load_topk"] == [2, 1, 1, 0]
    assert m["unused_rate"] == pytest.approx(0.25)


def test_entropy_is_over_the_full_alpha_normalised_by_log_k():
    assert entropy(torch.full((3, 4), 0.25)) == pytest.approx(1.0)
    assert entropy(_one_hot([0, 1, 2], 4)) == pytest.approx(0.0)
    assert entropy(torch.tensor([[0.5, 0.5, 0.0, 0.0]])) == pytest.approx(0.5)  # log 2 / log 4
    # the top-2 weights alone would read 1.0 here (log 2 / log 2); the full α does not
    alpha = torch.tensor([[0.3, 0.3, 0.2, 0.2]])
    want = -(2 * 0.3 * math.log(0.3) + 2 * 0.2 * math.log(0.2)) / math.log(4)
    assert entropy(alpha) == pytest.approx(want)


def test_confidence_margin_and_z_loss():
    d = decision_metrics(torch.tensor([[0.7, 0.2, 0.1, 0.0], [0.25, 0.25, 0.25, 0.25]]), logits=torch.zeros(2, 4))
    assert d["top1_weight"] == pytest.approx((0.7 + 0.25) / 2) and d["margin"] == pytest.approx(0.25)
    assert d["z_loss"] == pytest.approx(math.log(4) ** 2)
    assert z_loss(torch.tensor([[0.0, math.log(3.0)]])) == pytest.approx(math.log(4) ** 2)


def test_specialisation_by_hand():
    domains, experts = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 0])
    counts = contingency(domains, experts, 2, 2)
    assert counts.tolist() == [[2, 0], [1, 1]]
    m = specialisation_metrics(experts.unsqueeze(1), domains, 2, 2)
    assert m["affinity"] == [[1.0, 0.0], [0.5, 0.5]]
    assert m["purity"] == pytest.approx(0.75) and m["routed_accuracy"] == pytest.approx(0.75)
    assert m["nmi"] == pytest.approx(normalized_mutual_info_score(domains.numpy(), experts.numpy()))
    perfect = specialisation_metrics(domains.unsqueeze(1), domains, 2, 2)
    assert perfect["nmi"] == pytest.approx(1.0) and perfect["purity"] == 1.0 and perfect["routed_accuracy"] == 1.0
    assert nmi(contingency(domains, torch.zeros(4, dtype=torch.long), 2, 2)) == pytest.approx(0.0)  # all on one


def test_jaccard_coactivation_and_gram_by_hand():
    selected = torch.tensor([[0, 1], [0, 2], [1, 2]])  # S0 = {0, 1}, S1 = {0, 2}, S2 = {1, 2}
    inter = intersections(selected, 3)
    assert inter.tolist() == [[2, 1, 1], [1, 2, 1], [1, 1, 2]]
    assert jaccard(inter)[0, 1] == pytest.approx(1 / 3) and jaccard(inter)[0, 0] == pytest.approx(1.0)
    m = specialisation_metrics(selected, torch.tensor([0, 1, 2]), 3, 3)
    assert m["coactivation"][0][1] == pytest.approx(1 / 3) and m["coactivation"][2][2] == pytest.approx(2 / 3)
    e1, e2 = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([[0.0, 3.0], [0.0, 0.0]])
    assert gram([e1, 2 * e1, e2]).tolist() == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    assert gram([e1, -e1]).tolist() == [[1, -1], [-1, 1]]


def test_stability_by_hand():
    a, b = torch.tensor([[0], [0], [0], [1], [1], [2]]), torch.tensor([[0], [0], [0], [1], [2], [3]])
    s = stability_metrics(a, b, 4)
    assert s["agreement"] == pytest.approx(4 / 6) and s["saturation"] == pytest.approx(4 / 6)
    # loads (3, 2, 1, 0) vs (3, 1, 1, 1): τ-b of the usage ranks, as scipy computes it
    from scipy.stats import kendalltau

    assert s["kendall_tau"] == pytest.approx(kendalltau([3, 2, 1, 0], [3, 1, 1, 1]).statistic)
    same = stability_metrics(a, a, 4)
    assert same == {"agreement": 1.0, "saturation": 1.0, "kendall_tau": pytest.approx(1.0)}
    top2 = stability_metrics(torch.tensor([[0, 1], [2, 3]]), torch.tensor([[1, 0], [2, 0]]), 4)
    assert top2["saturation"] == pytest.approx((2 / 2 + 1 / 2) / 2) and top2["agreement"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.randn(5, 4), "not a probability matrix"),
        (torch.full((5, 4), 0.3), "not a probability matrix"),
        (torch.ones(5), r"\(N, K\) tensor"),
        (torch.tensor([[float("nan"), 1.0]]), "NaN"),
    ],
)
def test_bad_alpha_is_one_clear_line(bad, message):
    with pytest.raises(RedkitError, match=message) as err:
        routing_metrics(bad)
    assert "\n" not in str(err.value)


def test_mismatched_shapes_are_one_clear_line():
    alpha = torch.full((4, 3), 1 / 3)
    for call in (
        lambda: routing_metrics(alpha, logits=torch.zeros(5, 3)),
        lambda: routing_metrics(alpha, selected=torch.zeros(3, 1, dtype=torch.long)),
        lambda: specialisation_metrics(torch.zeros(4, 1, dtype=torch.long), torch.zeros(3, dtype=torch.long), 3, 3),
        lambda: stability_metrics(torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 2, dtype=torch.long), 3),
    ):
        with pytest.raises(RedkitError, match="shapes do not match"):
            call()
    with pytest.raises(RedkitError, match="outside 0..2"):
        routing_metrics(alpha, selected=torch.full((4, 1), 3))


@pytest.mark.slow
@pytest.mark.parametrize("num_experts", [5, 32])
def test_a_million_decisions_in_batches(num_experts):
    """Metrics of a million routing decisions, computed in batches. How long they take is printed
    (`pytest -s -k million`: about 1 s on an idle core), not asserted: a test fails on behaviour, not
    on a busy machine."""
    n = 1_000_000
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(n, num_experts, generator=gen)
    alpha = torch.softmax(logits, dim=1)
    domains = torch.randint(0, num_experts, (n,), generator=gen)
    selected = alpha.topk(2, dim=1).indices
    start = time.perf_counter()
    m = routing_metrics(alpha, k=2, logits=logits, batch_size=4096)  # validates α, takes its own top-k
    middle = time.perf_counter()
    specialisation_metrics(selected, domains, num_experts, num_experts)
    seconds = time.perf_counter() - start
    print(
        f"\nN = 1e6, K = {num_experts}, k = 2: load + decision metrics {middle - start:.3f} s, "
        f"specialisation {seconds - (middle - start):.3f} s, total {seconds:.3f} s"
    )
    assert m["n"] == n and 0 <= m["cv"] < 0.05
