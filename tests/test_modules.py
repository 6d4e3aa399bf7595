"""Modules: the untrained expert is the identity, compositions agree where they must, and
artifacts round-trip as safetensors + JSON and refuse another backbone or width."""

import json
from types import SimpleNamespace

import pytest
import torch

from redkit.compositions import COMPOSITIONS
from redkit.errors import RedkitError
from redkit.modules import Classifier, Router
from redkit.modules.store import ModuleMeta, load_module, save_module
from redkit.red import REDModel
from redkit.red.layer import LogitExpert, ResidualExpert
from redkit_experiments.arithmetic.space import ANSWER_RANGES

D, C = 32, 99


def test_untrained_residual_expert_changes_nothing():
    torch.manual_seed(0)
    h = torch.randn(7, D)
    clf = Classifier(Classifier.Config(D, C))
    expert = ResidualExpert(ResidualExpert.Config(dim=D, rank=8))
    assert torch.equal(expert(h), torch.zeros_like(h))
    assert torch.equal(expert.alone_logits(h, clf), clf(h))
    logit_expert = LogitExpert(LogitExpert.Config(dim=D, num_classes=C))
    assert torch.equal(logit_expert.alone_logits(h, clf), clf(h))


def test_trained_expert_does_change_something():
    expert = ResidualExpert(ResidualExpert.Config(dim=D, rank=8))
    torch.nn.init.normal_(expert.up.weight)
    assert expert(torch.randn(3, D)).abs().sum() > 0


class FakeModules:
    """A ModuleSet stand-in with random modules, to test compositions without a run."""

    run = SimpleNamespace(space=ANSWER_RANGES)

    def __init__(self):
        torch.manual_seed(1)
        self._clf = Classifier(Classifier.Config(D, C))
        self._experts = [ResidualExpert(ResidualExpert.Config(D, 8)) for _ in range(5)]
        for e in self._experts:
            torch.nn.init.normal_(e.up.weight, std=0.5)
        self._router = Router(Router.Config(D, 5))

    def classifier(self):
        return self._clf

    def experts(self, kind):
        return self._experts

    def router(self):
        return self._router

    def red(self, kind):
        return REDModel.from_parts(self._clf, self._experts, self.run.space.domains)


def test_red_with_one_hot_alpha_is_that_expert_alone():
    modules, h = FakeModules(), torch.randn(10, D)
    labels = torch.tensor([0, 1, 2, 3, 4] * 2)
    probs = COMPOSITIONS["red_oracle"](modules, h, labels).probs
    for i in range(10):
        alone = torch.softmax(modules._experts[labels[i]].alone_logits(h[i : i + 1], modules._clf), dim=-1)
        assert torch.allclose(probs[i : i + 1], alone, atol=1e-6)


def test_red_weights_are_a_distribution_and_differ_from_uniform():
    modules, h = FakeModules(), torch.randn(10, D)
    red = COMPOSITIONS["red"](modules, h, torch.zeros(10, dtype=torch.long))
    uniform = COMPOSITIONS["red_uniform"](modules, h, torch.zeros(10, dtype=torch.long))
    assert torch.allclose(red.weights.sum(dim=1), torch.ones(10))
    assert torch.allclose(red.probs.sum(dim=1), torch.ones(10), atol=1e-5)
    assert not torch.allclose(red.probs, uniform.probs)


def test_unknown_composition_suggests_the_closest_name():
    with pytest.raises(RedkitError, match="did you mean 'red'"):
        COMPOSITIONS["rde"]


def _saved(tmp_path, fingerprint="abc"):
    expert = ResidualExpert(ResidualExpert.Config(dim=D, rank=8))
    torch.nn.init.normal_(expert.up.weight)
    save_module(
        tmp_path / "e",
        expert,
        ModuleMeta(kind="residual", config=vars(expert.config), backbone_fingerprint=fingerprint, domain=2),
    )
    return expert


def test_module_round_trips_as_safetensors_and_json(tmp_path):
    expert = _saved(tmp_path)
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((tmp_path / "e" / "config.json").read_text())
    assert config["kind"] == "residual" and config["domain"] == 2 and config["config"] == {"dim": D, "rank": 8}
    loaded, meta = load_module(tmp_path / "e", fingerprint="abc", dim=D)
    h = torch.randn(4, D)
    assert torch.equal(loaded(h), expert(h))


def test_loading_refuses_another_backbone_or_width_or_nothing(tmp_path):
    _saved(tmp_path)
    with pytest.raises(RedkitError, match="trained on backbone abc"):
        load_module(tmp_path / "e", fingerprint="xyz")
    with pytest.raises(RedkitError, match="width 32"):
        load_module(tmp_path / "e", fingerprint="abc", dim=384)
    with pytest.raises(RedkitError, match="no trained module"):
        load_module(tmp_path / "missing")
