"""CLINC150 as its authors published it: the reader, bad input, the honest references (joint,
linear_probe), the label-structure composition and router, and the oos-threshold protocol, on a
tiny set generated in the same layout (the real set is a benchmark, not a test)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from conftest import run_cli
from redkit.fitting.topics import write_clinc_format


@pytest.fixture(scope="module")
def clinc_dir(tmp_path_factory) -> Path:
    return write_clinc_format(tmp_path_factory.mktemp("clinc") / "data")


@pytest.fixture(scope="module")
def clinc_run(clinc_dir, tmp_path_factory) -> Path:
    from redkit.cli import main

    out = tmp_path_factory.mktemp("clinc-run") / "run"
    assert main(["reproduce", "clinc150", "--data", str(clinc_dir), "--out", str(out), "--max-epochs", "2"]) == 0
    return out


def test_reader_keeps_domains_and_oos_apart(clinc_dir):
    from redkit.data.clinc150 import read_clinc150

    data = read_clinc150(clinc_dir)
    assert data.domains == ("banking", "cooking", "travel") and len(data.intents) == 9
    assert {len(v) for v in data.oos.values()} == {6, 8}
    assert all(r.domain in data.domains and r.answer in data.intents for r in data.splits["test"])


def _damaged(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    data, domains = json.loads((dst / "data_full.json").read_text()), json.loads((dst / "domains.json").read_text())
    edit(data, domains)
    (dst / "data_full.json").write_text(json.dumps(data))
    (dst / "domains.json").write_text(json.dumps(domains))
    return dst


BAD = {
    "missing split": (lambda d, m: d.pop("oos_val"), "data_full.json: no split 'oos_val'"),
    "malformed pair": (lambda d, m: d["train"].__setitem__(3, ["only text"]), "data_full.json: train[3] is not a [text, intent] pair"),
    "intent without domain": (lambda d, m: m["banking"].remove("refund"), "intent 'refund' has no domain in"),
    "intent in two domains": (lambda d, m: m["travel"].append("refund"), "domains.json: intent 'refund' is in two domains"),
    "oos in an in-scope split": (lambda d, m: d["val"].__setitem__(0, ["hello", "oos"]), "val[0]: an out-of-scope query"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_clinc_files_are_one_line_and_write_nothing(clinc_dir, tmp_path, capsys, case):
    edit, message = BAD[case]
    data = _damaged(clinc_dir, tmp_path / "data", edit)
    out = tmp_path / "run"
    code, _, err = run_cli(["reproduce", "clinc150", "--data", data, "--out", out], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_an_oos_file_with_in_scope_labels_is_refused(tmp_path, capsys):
    from redkit.fitting.topics import write_topics

    data = write_topics(tmp_path / "data", train=120, val=0, test=0, domains=2, labels_per_domain=2)
    oos = tmp_path / "oos.jsonl"
    oos.write_text('{"text": "what is the weather on mars"}\n{"text": "refund my card", "label": "refund"}\n')
    code, _, err = run_cli(["fit", "--data", data, "--out", tmp_path / "run", "--oos", oos], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "oos.jsonl:2: field 'label' = 'refund' is one of the run's in-scope labels" in err
    assert not (tmp_path / "run").exists()


class _Modules:
    """The least a mixture needs: a classifier, residual experts and the run's LabelSpace."""

    def __init__(self, classifier, experts, space):
        self._classifier, self._experts = classifier, experts
        self.run = type("R", (), {"space": space})()

    def classifier(self):
        return self._classifier

    def experts(self, kind):
        return self._experts


def test_red_within_with_untrained_experts_and_the_label_router_is_the_classifier():
    """p(y) = α_d(y) p_d(y) with α the domain marginal of softmax(C h) and Δh = 0 is softmax(C h)
    exactly: the factorisation p(y) = p(d) p(y | d). Any error in the mask, the mixing or the router
    breaks it."""
    from redkit.compositions import MIXTURES
    from redkit.modules.layers import Classifier, ResidualExpert
    from redkit.routing.routers.labels import LabelRouter, LabelRouterConfig
    from redkit.space import LabelSpace

    torch.manual_seed(0)
    space = LabelSpace.of_labels(tuple("abcdefg"), ("x", "y", "z"), ("x", "y", "y", "z", "x", "z", "z"))
    classifier = Classifier(Classifier.Config(dim=8, num_classes=7))
    experts = [ResidualExpert(ResidualExpert.Config(dim=8, rank=2)) for _ in range(3)]  # B = 0: Δh = 0
    router = LabelRouter(LabelRouterConfig(dim=8, num_experts=3, num_classes=7, source="classifier"))
    router.head.load_state_dict(classifier.linear.state_dict())
    router.membership.copy_(space.domain_mask().float())
    h = torch.randn(5, 8)
    alpha = router.route(h).weights
    assert torch.allclose(alpha.sum(dim=-1), torch.ones(5), atol=1e-6)
    mixture = MIXTURES["within"]
    modules = _Modules(classifier, experts, space)
    probs = mixture.mix(modules, h, mixture.outputs(modules, h), alpha)
    assert torch.allclose(probs, F.softmax(classifier(h), dim=-1), atol=1e-6)
    # One-hot α keeps all of the mass inside that domain's labels.
    one_hot = mixture.mix(modules, h, mixture.outputs(modules, h), F.one_hot(torch.full((5,), 1), 3).float())
    assert torch.allclose(one_hot[:, [1, 2]].sum(dim=-1), torch.ones(5), atol=1e-6)


def test_shared_labels_refuse_the_label_structure():
    from redkit.errors import RedkitError
    from redkit.space import LabelSpace

    with pytest.raises(RedkitError, match="do not each belong to one domain"):
        LabelSpace.of_labels(("a", "b"), ("x", "y")).domain_mask()


def test_threshold_separates_and_auroc_counts_ranks():
    from redkit.oos.threshold import choose_threshold, oos_metrics

    in_scores, oos_scores = np.array([0.9, 0.8, 0.95, 0.7]), np.array([0.2, 0.3, 0.75])
    correct = np.array([True, True, False, True])
    tau = choose_threshold(in_scores, correct, oos_scores)
    metrics = oos_metrics(tau, in_scores, correct, oos_scores)
    # τ = 0.8 rejects every OOS query (recall 1) and keeps two right in-scope ones (0.5): 1.5, the best sum
    assert tau == 0.8 and metrics["in_scope_accuracy"] == 0.5 and metrics["oos_recall"] == 1.0
    assert metrics["auroc"] == pytest.approx(11 / 12)  # one OOS score (0.75) above one in-scope score (0.7)


@pytest.mark.slow
def test_clinc_run_has_references_label_structure_and_oos(clinc_run):
    import redkit

    results = json.loads((clinc_run / "results.json").read_text())
    test = results["splits"]["test"]
    for name in ("red", "red_within", "red_within_oracle", "joint", "linear_probe", "global_full"):
        assert 0.0 <= test[name]["accuracy"] <= 1.0 and test[name]["n"] == 36
    assert {"joint", "linear_probe"} <= set(results["wall_seconds_per_stage"])
    oos = results["oos"]
    assert set(oos["test"]) >= {"red", "red_within", "joint", "linear_probe"} and "red_oracle" not in oos["test"]
    for metrics in oos["test"].values():
        assert 0.0 <= metrics["oos_recall"] <= 1.0 and 0.0 <= metrics["auroc"] <= 1.0
    assert (clinc_run / "figures" / "oos_tradeoff.png").is_file()
    report = (clinc_run / "report.md").read_text()
    assert "Larson et al. (2019), Table 2" in report and "RED against the references" in report
    chosen = json.loads((clinc_run / "oos.json").read_text())["red"]
    prediction = redkit.load(clinc_run).predict(["how do i freeze my card", "who won the football game"])
    assert all(isinstance(p.out_of_scope, bool) for p in prediction)
    assert chosen["score"] in ("msp", "router", "product")
