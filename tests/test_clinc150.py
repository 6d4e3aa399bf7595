"""CLINC150 as its authors published it: the reader, bad input, the honest references (joint,
linear_probe), the label-structure composition and router, and the oos-threshold protocol, on a
tiny set generated in the same layout (the real set is a benchmark, not a test)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli
from torch.nn import functional as F

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
    "malformed pair": (
        lambda d, m: d["train"].__setitem__(3, ["only text"]),
        "data_full.json: train[3] is not a [text, intent] pair",
    ),
    "intent without domain": (lambda d, m: m["banking"].remove("refund"), "intent 'refund' has no domain in"),
    "intent in two domains": (
        lambda d, m: m["travel"].append("refund"),
        "domains.json: intent 'refund' is in two domains",
    ),
    "oos in an in-scope split": (
        lambda d, m: d["val"].__setitem__(0, ["hello", "oos"]),
        "val[0]: an out-of-scope query",
    ),
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
    """The least a mixture needs: the RED model (classifier, residual experts) and the run's LabelSpace."""

    def __init__(self, classifier, experts, space):
        from redkit.red import REDModel

        self._red = REDModel.from_parts(classifier, experts, space.domains)
        self.run = type("R", (), {"space": space})()

    def red(self, kind):
        return self._red


def test_red_per_domain_with_untrained_experts_and_the_label_router_is_the_classifier():
    """p(y) = α_d(y) p_d(y) with α the domain marginal of softmax(C h) and Δh = 0 is softmax(C h)
    exactly: the factorisation p(y) = p(d) p(y | d). Any error in the mask, the mixing or the router
    breaks it."""
    from redkit.compositions import MIXTURES
    from redkit.modules.layers import Classifier
    from redkit.red.layer import ResidualExpert
    from redkit.routers.labels import LabelRouter, LabelRouterConfig
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
    # Pooled accuracy over the 7 queries: τ = 0.7 gets 3 + 2 right, τ = 0.8 gets 2 + 3, τ = 0.9 gets 1 + 3.
    # Ties go to the lowest threshold (argmax's first), which rejects least.
    assert tau == 0.7 and metrics["in_scope_accuracy"] == 0.75 and metrics["oos_recall"] == pytest.approx(2 / 3)
    assert metrics["auroc"] == pytest.approx(11 / 12)  # one OOS score (0.75) above one in-scope score (0.7)


@pytest.mark.slow
def test_clinc_run_has_references_label_structure_and_oos(clinc_run):
    import redkit

    results = json.loads((clinc_run / "results.json").read_text())
    test = results["splits"]["test"]
    for name in ("red", "red_per_domain", "red_per_domain_oracle", "joint", "linear_probe", "global_head"):
        assert 0.0 <= test[name]["accuracy"] <= 1.0 and test[name]["n"] == 36
    assert "linear_probe" in results["wall_seconds_per_stage"]  # joint: stage base itself (base fraction 1.0)
    assert "joint" not in results["wall_seconds_per_stage"] and results["config"]["base_fraction"] == 1.0
    assert test["joint"]["accuracy"] == test["base_classifier"]["accuracy"]  # the same classifier on the same features
    oos = results["oos"]
    assert set(oos["test"]) >= {"red", "red_per_domain", "joint", "linear_probe"} and "red_oracle" not in oos["test"]
    for metrics in oos["test"].values():
        assert 0.0 <= metrics["oos_recall"] <= 1.0 and 0.0 <= metrics["auroc"] <= 1.0
    assert (clinc_run / "figures" / "oos_tradeoff.png").is_file()
    report = (clinc_run / "report.md").read_text()
    assert "Larson et al. (2019), Table 2" in report and "RED against the references" in report
    chosen = json.loads((clinc_run / "oos.json").read_text())["red"]
    prediction = redkit.load(clinc_run).predict(["how do i freeze my card", "who won the football game"])
    assert all(isinstance(p.out_of_scope, bool) for p in prediction)
    assert chosen["score"] in ("msp", "router", "product")


@pytest.mark.slow
def test_levers_study_measures_every_lever_without_touching_the_run(clinc_run, tmp_path):
    from redkit_experiments.study import run_levers_study
    from redkit_experiments.study.levers import OWN, LeverConfig

    run = tmp_path / "run"
    shutil.copytree(clinc_run, run)
    twin = tmp_path / "twin"  # a replicate: the same run again (every difference 0, no test to make)
    shutil.copytree(clinc_run, twin)
    before = sorted(str(p.relative_to(run)) for p in (run / "modules").rglob("*.safetensors"))
    result = run_levers_study(
        [run], LeverConfig(ranks=(8,), temperatures=(2.0,)), print_fn=lambda *_: None, replicates=[twin]
    )
    assert set(result["routing"]) == {
        OWN,
        "dense, hidden 1024",
        "(a) label loss",
        "(a) label + domain loss",
        "(b) dense_labels: reads G's label distribution",
        "(c) GShard top-2",
        "(b) labels from G (training-free)",
        "(b) labels from C (training-free)",
        "(d) prototype (training-free)",
        "(c) dense, α at T=2",
        "(d) pool: dense × labels from G",
        "(d) dense on the pretrained backbone's features",
    }
    assert set(result["experts"]) == {"rank 96 (the run's)", "rank 48"}
    for rows in (result["routing"], result["experts"]):
        for row in rows.values():
            assert all(
                0.0 <= row[f"{c}_{s}"] <= 1.0 for c in ("red", "red_mixture", "red_per_domain") for s in ("val", "test")
            )
    seeds = result["over_seeds"]["routing"]
    assert seeds[OWN]["diff_test"] == 0.0 and seeds[OWN]["p_test"] is None
    assert result["base"][0]["base_fraction"] == 1.0 and "joint_test" in result["base"][0]
    assert sorted(str(p.relative_to(run)) for p in (run / "modules").rglob("*.safetensors")) == before
    report = (run / "studies" / "levers" / "report.md").read_text()
    assert "Over 2 seeds" in report and "(a) label loss" in report


def test_the_label_loss_trains_the_router_through_the_frozen_composition():
    """composition_loss is CE(C(h + Σ α Δh), y): with Δh = 0 it is C's own loss whatever α (the
    router cannot lower it), and its gradient reaches the router only through α."""
    from redkit.modules.layers import Classifier, Router, RouterConfig
    from redkit.train.stages import composition_loss

    torch.manual_seed(0)
    classifier = Classifier(Classifier.Config(dim=6, num_classes=4))
    router = Router(RouterConfig(dim=6, num_experts=3))
    h, y, d = torch.randn(10, 6), torch.randint(0, 4, (10,)), torch.randint(0, 3, (10,))
    zero = torch.zeros(10, 3, 6)
    loss = composition_loss(classifier, with_domain=False)(router, h, y, d, zero)
    assert loss.item() == pytest.approx(F.cross_entropy(classifier(h), y).item(), abs=1e-6)
    updates = torch.randn(10, 3, 6)
    both = composition_loss(classifier, with_domain=True)(router, h, y, d, updates)
    alpha = F.softmax(router(h), dim=-1)
    expected = F.cross_entropy(classifier(h + (alpha.unsqueeze(-1) * updates).sum(1)), y) + F.cross_entropy(
        router(h), d
    )
    assert both.item() == pytest.approx(expected.item(), abs=1e-6)
    both.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in router.parameters())


@pytest.mark.slow
def test_red_mixture_mixes_the_experts_predictions(clinc_run):
    """red_mixture = Σ_i α_i softmax(C(h + Δh_i)), computed here by hand from the run's modules."""
    from redkit.compositions import ModuleSet, compose
    from redkit.fitting.run import FitRun

    run = FitRun(clinc_run)
    modules = ModuleSet(run)
    h, _, domains = run.split_tensors("test")
    red = modules.red("residual")
    with torch.no_grad():
        alpha = F.softmax(modules.router()(h), dim=-1)
        by_hand = sum(
            alpha[:, i : i + 1] * F.softmax(red.classifier(h + expert(h)), dim=-1)
            for i, expert in enumerate(red.experts)
        )
    composed = compose("red_mixture", modules, h, domains)
    torch.testing.assert_close(composed.probs, by_hand)
    torch.testing.assert_close(composed.weights, alpha)


@pytest.mark.slow
def test_predict_answers_out_of_scope_by_the_views_score(clinc_run, tmp_path):
    """With the `views` score chosen (z(knn_domain) + z(knn_pretrained), standardised by val's
    statistics), predict rejects exactly the texts whose score falls below the threshold."""
    import redkit
    from redkit.compositions import ModuleSet, compose
    from redkit.features import encode
    from redkit.oos.evaluate import composition_scores, views_of
    from redkit.references.linear_probe import frozen_backbone

    run_dir = tmp_path / "run"
    shutil.copytree(clinc_run, run_dir)
    texts = [
        "how do i freeze my card",
        "who won the football game",
        "book a table for two",
        "what is the capital of peru",
    ]
    fitted = redkit.load(run_dir)
    run = fitted.run
    h = encode(run.backbone, texts)
    composed = compose("red", ModuleSet(run), h, torch.zeros(4, dtype=torch.long))
    stats = {"knn_domain": (0.5, 0.2), "knn_pretrained": (0.4, 0.1)}
    scores = composition_scores(composed, h, encode(frozen_backbone(run), texts), views_of(run), stats)["views"]
    threshold = float(scores.sort().values[1:3].mean())  # between the second and third: two texts below
    (run_dir / "oos.json").write_text(
        json.dumps({"red": {"score": "views", "threshold": threshold, "stats": {k: list(v) for k, v in stats.items()}}})
    )
    answers = redkit.load(run_dir).predict(texts)
    assert [a.out_of_scope for a in answers] == (scores < threshold).tolist()
    assert sum(a.out_of_scope for a in answers) == 2
