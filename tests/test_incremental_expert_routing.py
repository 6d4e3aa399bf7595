"""scripts/incremental_expert_routing.py: the routers it pairs, checked by hand."""

import torch
from conftest import load_script

routing = load_script("incremental_expert_routing")


def evidence() -> dict[str, torch.Tensor]:
    # 2 queries, 3 owners: the ridge prefers owner 0 then 1 then 2; the density prefers owner 2, then 1
    ridge = torch.tensor([[0.9, 0.8, 0.1], [0.2, 0.7, 0.6]], dtype=torch.float64)
    density = torch.tensor([[0.0, 2.0, 10.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
    return {"ridge": ridge, "density": density}


def test_a_kind_alone_routes_to_its_largest_owner():
    assert routing.route(evidence(), "density").tolist() == [2, 2]
    assert routing.route(evidence(), "ridge").tolist() == [0, 1]


def test_beside_the_ridge_over_every_owner_or_its_best_few():
    e = evidence()
    assert routing.route(e, "density", beta=0.0).tolist() == [0, 1]  # β 0: the ridge alone
    # every owner at β 0.1: query 0 scores (0.9, 1.0, 1.1) -> owner 2; query 1 (0.2, 0.7, 0.8) -> owner 2
    assert routing.route(e, "density", beta=0.1).tolist() == [2, 2]
    # among the ridge's best 2 only: query 0 chooses between owners 0 and 1 (0.9 against 1.0), query 1 between
    # 1 and 2 (0.7 against 0.8)
    assert routing.route(e, "density", beta=0.1, scope=2).tolist() == [1, 2]
