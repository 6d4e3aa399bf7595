"""The router zoo: each router's selection rule, capacity, balancing and auxiliary loss do what its
docstring says; routers are found by name (with did-you-mean) and saved/loaded as modules."""

import re
from pathlib import Path

import pytest
import torch

from redkit.errors import RedkitError
from redkit.modules.layers import MODULES, ROUTERS
from redkit.modules.routing import RouterBase
from redkit.modules.store import ModuleMeta, load_module, save_module
from redkit.routers.free import ArrowRouter, PrototypeRouter
from redkit.routers.spectra import sinkhorn

D, K, N = 16, 4, 64
TRAINED = [name for name in ROUTERS.names() if not ROUTERS[name].training_free]


def _router(name: str, **overrides):
    torch.manual_seed(0)
    cls = ROUTERS[name]
    return cls(cls.Config(dim=D, num_experts=K, **overrides))


def _skewed(router, expert: int = 0) -> None:
    """Make every decision prefer `expert` strongly (the scorer's last bias)."""
    with torch.no_grad():
        last = router.scorer.net[-1]
        last.weight.zero_()
        last.bias.copy_(torch.arange(K, 0, -1).float() * 0.1)
        last.bias[expert] = 5.0


@pytest.mark.parametrize("name", TRAINED)
def test_every_trained_router_routes_apart_from_the_experts(name):
    router = _router(name)
    h = torch.randn(N, D)
    for training in (True, False):
        router.train(training)
        out = router.route(h)
        assert out.weights.shape == (N, K) and out.probs.shape == (N, K) and out.logits.shape == (N, K)
        assert out.selected.dim() == 2 and out.selected.shape[0] == N and int(out.selected.max()) < K
        assert (out.weights >= 0).all() and out.aux_loss.dim() == 0
        assert torch.allclose(out.probs.sum(dim=1), torch.ones(N), atol=1e-5)
    assert torch.equal(router(h), router.route(h).logits)  # forward = logits: a drop-in for the dense router


@pytest.mark.parametrize("name", ROUTERS.names())
def test_every_router_the_dense_one_included_has_one_declared_interface(name):
    cls = ROUTERS[name]
    assert issubclass(cls, RouterBase) and cls.route is not RouterBase.route
    assert cls.name == name and MODULES[cls.kind] is cls and isinstance(cls.training_free, bool)
    assert cls.training_free == (name in ("prototype", "arrow", "labels", "gaussian"))
    assert cls.replay_free == (name == "gaussian")  # built from each domain's own module: owner_part is its
    assert (cls.owner_part.__func__ is not RouterBase.owner_part.__func__) == cls.replay_free


def test_the_spine_does_not_probe_routers_for_what_they_are():
    root = Path(__file__).resolve().parent.parent
    files = [
        root / "redkit/compositions.py",
        *sorted((root / "redkit/train/stages").glob("*.py")),
        root / "redkit/routers/base.py",
        root / "redkit_experiments/routing/analyze.py",
    ]
    assert len(files) > 4  # the stages' package was found
    for file in files:
        text = file.read_text()
        assert not re.search(r"hasattr\([^)]*\"route\"|getattr\([^)]*\"(training_free|kind)\"", text), file


def test_unknown_router_has_did_you_mean():
    with pytest.raises(RedkitError, match="did you mean 'switch'"):
        ROUTERS["swich"]
    assert {"dense", "switch", "top2", "expert_choice", "loss_free", "spectra", "prototype", "arrow"} <= set(
        ROUTERS.names()
    )


def test_switch_drops_overflow_in_training_only_and_its_loss_sees_imbalance():
    router = _router("switch")
    _skewed(router)
    h = torch.randn(N, D)
    router.train()
    out = router.route(h)
    cap = -(-5 * N // (4 * K))  # ⌈1.25 N / K⌉ = 20
    assert (out.weights[:, 0] > 0).sum() == cap and (out.selected[:, 0] == 0).all()
    assert out.aux_loss.item() == pytest.approx(1e-2 * K * out.probs[:, 0].mean().item(), rel=1e-5)  # f = (1, 0, 0, 0)
    router.eval()
    assert (router.route(h).weights[:, 0] > 0).all()  # no dropping in evaluation
    balanced = _router("switch").train().route(h)
    assert balanced.aux_loss.item() < out.aux_loss.item()


def test_top2_renormalises_over_the_two():
    out = _router("top2").eval().route(torch.randn(N, D))
    assert out.selected.shape == (N, 2) and torch.allclose(out.weights.sum(dim=1), torch.ones(N))
    assert ((out.weights > 0).sum(dim=1) == 2).all()


def test_loss_free_bias_moves_by_u_against_the_load_and_only_in_training():
    router = _router("loss_free")
    _skewed(router, expert=2)
    h = torch.randn(N, D)
    router.eval().route(h)
    assert torch.equal(router.bias, torch.zeros(K))
    router.train().route(h)
    assert router.bias.tolist() == pytest.approx([1e-3, 1e-3, -1e-3, 1e-3])
    assert router.route(h).aux_loss.item() == 0.0
    with torch.no_grad():
        router.bias.copy_(torch.tensor([0.0, 0.0, -10.0, 0.0]))  # the bias changes the selection, not the gates
    out = router.eval().route(h)
    assert (out.selected[:, 0] != 2).all() and torch.allclose(
        out.weights.sum(dim=1), out.probs.gather(1, out.selected)[:, 0]
    )


def test_expert_choice_balances_perfectly_by_construction():
    router = _router("expert_choice")
    _skewed(router)
    out = router.route(torch.randn(N, D))
    per_expert = (out.weights > 0).sum(dim=0)
    assert per_expert.tolist() == [2 * N // K] * K  # C = ⌈2 N / K⌉ each, whatever the scores


def test_spectra_prototypes_start_orthogonal_and_the_quota_caps_training_load():
    router = _router("spectra")
    assert router.orthogonality().item() == pytest.approx(0.0, abs=1e-10)
    with torch.no_grad():
        router.project.weight.zero_()
        router.project.bias.copy_(router.prototypes[1] * 3)  # every decision nearest prototype 1
    h = torch.randn(N, D)
    router.eval()
    assert (router.route(h).selected[:, 0] == 1).all()  # inference: plain top-k
    out = router.train().route(h)
    cap = -(-5 * N // (4 * K))
    assert ((out.weights > 0).sum(dim=0) <= cap).all()
    q = sinkhorn(torch.randn(N, K) * 3, 50)
    assert torch.allclose(q.sum(dim=1), torch.ones(N), atol=1e-5)
    assert torch.allclose(q.sum(dim=0), torch.full((K,), N / K), rtol=1e-2)


def test_training_free_routers_pick_the_nearest_prototype_and_the_arrow_direction():
    means = PrototypeRouter.domain_means(torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0, 1]), 2)
    assert means.tolist() == [[2.0, 0.0], [0.0, 2.0]]
    proto = PrototypeRouter.with_vectors(means)
    out = proto.route(torch.tensor([[5.0, 1.0], [0.1, -0.0], [-1.0, 4.0]]))
    assert out.selected[:, 0].tolist() == [0, 0, 1] and out.weights.sum(dim=1).tolist() == [1.0, 1.0, 1.0]
    v = torch.eye(3)
    updates = [torch.outer(torch.randn(5), v[i]) * (i + 1) for i in range(3)]  # rank-1: input direction e_i
    dirs = ArrowRouter.directions(updates)
    assert torch.allclose(dirs.abs(), v, atol=1e-5)
    arrow = ArrowRouter.with_vectors(dirs, scale=1.0)
    assert arrow.route(torch.tensor([[0.0, -3.0, 1.0]])).selected.item() == 1  # |<h, v>|: the sign does not matter


@pytest.mark.parametrize("name", ["loss_free", "spectra", "prototype"])
def test_saved_router_round_trips_through_safetensors(tmp_path, name):
    router = PrototypeRouter.with_vectors(torch.randn(K, D)) if name == "prototype" else _router(name)
    if name == "loss_free":
        router.train().route(torch.randn(N, D))  # a non-zero bias buffer
    save_module(
        tmp_path / name, router, ModuleMeta(kind=router.kind, config=vars(router.config), backbone_fingerprint="fp")
    )
    loaded, meta = load_module(tmp_path / name, "fp", D)
    assert meta.kind == f"router_{name}" and type(loaded) is type(router) and MODULES[meta.kind] is type(router)
    h = torch.randn(8, D)
    assert torch.equal(loaded(h), router.eval()(h))
