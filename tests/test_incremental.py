"""`redkit study incremental` and replay-free RED (redkit/incremental): the stream, the metrics, statistics
that add up exactly in any order, the Gaussian router, each strategy's loss, and the study end to end on a
tiny set in CLINC150's layout (the real set is a benchmark, not a test)."""

import itertools
import json
import math
import shutil

import pytest
import torch
from conftest import run_cli

from redkit.errors import RedkitError
from redkit.fitting.topics import write_clinc_format
from redkit.incremental.gaussian import discriminant
from redkit.incremental.model import ReplayFreeRED
from redkit.incremental.owner import train_owner_share
from redkit.incremental.projection import ProjectionConfig, RandomProjection
from redkit.incremental.statistics import ClassStatistics, merge
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.methods.replay import Reservoir
from redkit_experiments.incremental.metrics import continual_metrics
from redkit_experiments.incremental.protocol import build_stream, read_data
from redkit_experiments.incremental.study import IncrementalConfig, StudyContext

QUICK = ["--epochs-per-step", "1"]


@pytest.fixture(scope="module")
def clinc_dir(tmp_path_factory):
    return write_clinc_format(tmp_path_factory.mktemp("inc") / "data")


@pytest.fixture(scope="module")
def studied(clinc_dir, tmp_path_factory):
    """Every method through the three domains of the tiny set, with the CLI."""
    from redkit.cli import main

    out = tmp_path_factory.mktemp("inc-study") / "order0"
    assert main(["study", "incremental", "--data", str(clinc_dir), "--out", str(out), *QUICK]) == 0
    return out


def test_metrics_by_hand():
    accuracy = [[0.9], [0.5, 0.8], [0.4, 0.7, 1.0]]
    seen = [0.9, 0.65, 0.7]
    m = continual_metrics(accuracy, seen)
    assert m["final_accuracy"] == 0.7 and m["average_incremental_accuracy"] == pytest.approx(0.75)
    assert m["forgetting"] == pytest.approx(((0.9 - 0.4) + (0.8 - 0.7)) / 2)
    assert m["backward_transfer"] == pytest.approx(((0.4 - 0.9) + (0.7 - 0.8)) / 2)
    assert continual_metrics([[0.5]], [0.5])["forgetting"] == 0.0
    gap = continual_metrics([[None], [None, 0.8], [None, 0.7, 1.0]], [0.0, 0.8, 0.8])  # step 0 has no test query
    assert gap["forgetting"] == pytest.approx(0.1) and gap["backward_transfer"] == pytest.approx(-0.1)
    with pytest.raises(ValueError):
        continual_metrics([[0.5], [0.5]], [0.5, 0.5])


def _owners(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    owners = {}
    for k, name in enumerate(["b", "a", "c"]):
        h = torch.randn(60, 8, generator=g, dtype=torch.float64) + 3 * k
        y = torch.randint(2, (60,), generator=g)
        owners[name] = (h, y, (f"{name}0", f"{name}1"))
    return owners


def test_statistics_add_up_exactly_in_any_order_to_the_pooled_ones():
    owners = _owners()
    stats = {name: ClassStatistics.of(h, y, labels) for name, (h, y, labels) in owners.items()}
    running = []
    for order in itertools.permutations(stats):
        total = None
        for name in order:
            total = stats[name] if total is None else merge({"earlier": total, "new": stats[name]})
        running.append(total.scatter)
    assert all(torch.equal(running[0], other) for other in running[1:])  # the same bits, whatever the order
    h = torch.cat([h for h, _, _ in owners.values()])
    classes = torch.cat([y + 2 * k for k, (_, y, _) in enumerate(owners.values())])
    pooled = ClassStatistics.of(h, classes, tuple(label for *_, labels in owners.values() for label in labels))
    assert torch.allclose(running[0], pooled.scatter, rtol=1e-9, atol=1e-6)
    with pytest.raises(RedkitError, match="brought by two owners"):
        merge({"x": stats["a"], "y": stats["a"]})
    with pytest.raises(RedkitError, match="no example of class"):
        ClassStatistics.of(h[:3], torch.zeros(3, dtype=torch.long), ("p", "q"))


def test_the_discriminant_scores_are_gaussian_log_likelihoods_up_to_one_shared_term():
    h, y, labels = _owners()["a"]
    stats = ClassStatistics.of(h, y, labels)
    weight, bias = discriminant(stats, shrinkage=0.0)
    covariance = stats.scatter / (float(stats.counts.sum()) - 2)
    x = torch.randn(5, 8, dtype=torch.float64)
    exact = torch.stack(
        [torch.distributions.MultivariateNormal(stats.means[c], covariance).log_prob(x) for c in range(2)], dim=1
    ) + torch.log(stats.counts / stats.counts.sum())
    scores = x @ weight.T + bias
    assert torch.allclose(scores[:, 0] - scores[:, 1], exact[:, 0] - exact[:, 1], atol=1e-8)


def test_replay_free_red_is_the_same_model_whatever_order_the_owners_came_in():
    projection = RandomProjection(ProjectionConfig(dim=8, width=32))
    owners = _owners()
    shares = {
        name: train_owner_share(name, labels, (h.float(), y), (h.float(), y), seed=7, projection=projection)
        for name, (h, y, labels) in owners.items()
    }
    states = []
    for order in (["a", "b", "c"], ["c", "a", "b"]):
        total = None
        for name in order:
            new = shares[name].statistics
            total = new if total is None else merge({"earlier": total, "new": new})
        states.append(ReplayFreeRED({n: shares[n] for n in order}, projection, total).state_dict())
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    model = ReplayFreeRED(shares, projection)
    log_p, alpha = model(owners["c"][0].float())
    assert torch.allclose(log_p.exp().sum(dim=1), torch.ones(60), atol=1e-5)  # one distribution over every class
    assert (alpha.argmax(dim=1) == model.domains.index("c")).float().mean() > 0.9  # far apart: routed home


def test_streams_of_both_protocols(clinc_dir):
    data = read_data(clinc_dir)
    domains = build_stream(data, "domains", order=0)
    assert sorted(s.name for s in domains.steps) == ["banking", "cooking", "travel"]
    assert all(len(s.classes) == 3 for s in domains.steps)
    other = build_stream(data, "domains", order=1)
    assert {s.name: s.classes for s in other.steps} == {s.name: s.classes for s in domains.steps}
    classes = build_stream(data, "classes", order=0, classes_per_task=3)
    assert sorted(c for s in classes.steps for c in s.classes) == list(range(9))
    assert {s.classes for s in classes.steps} == {s.classes for s in build_stream(data, "classes", 5, 3).steps}
    rows = classes.rows("train", [0])
    assert set(classes.class_of["train"][rows].tolist()) == set(classes.steps[0].classes)
    with pytest.raises(RedkitError, match="fewer than 2 tasks"):
        build_stream(data, "classes", 0, classes_per_task=5)


def test_reservoir_keeps_every_item_about_as_often():
    kept = torch.zeros(100)
    for seed in range(300):
        reservoir = Reservoir(10, seed)
        for row in range(100):
            reservoir.offer(row)
        assert len(reservoir.rows) == 10 and reservoir.seen == 100
        kept[reservoir.rows] += 1
    assert kept.min() > 10 and kept.max() < 55  # each about 300 * 10 / 100 = 30 times


def test_the_study_writes_every_method_with_what_it_keeps(studied):
    results = json.loads((studied / "results.json").read_text())
    assert results["protocol"] == "domains" and results["order"] == 0 and len(results["steps"]) == 3
    assert set(results["methods"]) == set(METHODS.names())
    for name, m in results["methods"].items():
        assert len(m["per_step"]) == 3 and {"stored_examples", "stored_bytes", "seconds"} <= set(m), name
        if name != "joint":
            for key in ("final_accuracy", "average_incremental_accuracy", "forgetting", "backward_transfer"):
                assert 0 <= abs(m[key]) <= 1, (name, key)
            assert [len(r["accuracy_by_step"]) for r in m["per_step"]] == [1, 2, 3]
        assert {"in_scope_accuracy", "oos_recall", "auroc"} <= set(m["oos"]), name
    methods = results["methods"]
    assert methods["red"]["stored_examples"] == 0 and methods["finetune"]["stored_bytes"] == 0
    assert methods["er_200"]["stored_examples"] == 144 and methods["red_replay"]["stored_examples"] == 144 + 36
    assert methods["joint"]["per_step"][-1]["seen_accuracy"] == methods["joint"]["final_accuracy"]
    assert "seen_accuracy" not in methods["joint"]["per_step"][0]  # joint retrained at the last step only
    assert (studied / "figures" / "accuracy_by_step.png").stat().st_size > 5000
    assert "| **red** |" in (studied / "report.md").read_text()


def test_red_gives_the_same_answers_whatever_the_order(clinc_dir, studied, tmp_path, capsys):
    finals = []
    for order in (1, 2):
        out = tmp_path / f"order{order}"
        code, _, err = run_cli(
            [
                "study",
                "incremental",
                "--data",
                clinc_dir,
                "--out",
                out,
                "--order",
                str(order),
                "--method",
                "red",
                *QUICK,
            ],
            capsys,
        )
        assert code == 0, err
        finals.append(json.loads((out / "results.json").read_text()))
    first = json.loads((studied / "results.json").read_text())
    assert [r["steps"] for r in finals] != [first["steps"]] * 2  # the orders differ ...
    assert {r["methods"]["red"]["final_accuracy"] for r in finals} == {first["methods"]["red"]["final_accuracy"]}


def test_a_rerun_reads_finished_methods_back(clinc_dir, studied, tmp_path, monkeypatch, capsys):
    out = tmp_path / "again"
    shutil.copytree(studied, out)
    (out / "methods" / "ncm.json").unlink()  # as if the study had been stopped while ncm trained
    trained = []
    for name in METHODS.names():
        original = METHODS[name].learn
        monkeypatch.setattr(
            METHODS[name],
            "learn",
            lambda self, t, name=name, original=original: trained.append(name) or original(self, t),
        )
    code, _, err = run_cli(["study", "incremental", "--data", clinc_dir, "--out", out, *QUICK], capsys)
    assert code == 0, err
    assert trained == ["ncm"] * 3  # every other method read back, not trained again
    again = json.loads((out / "results.json").read_text())["methods"]
    assert (
        again["ncm"]["final_accuracy"]
        == json.loads((studied / "results.json").read_text())["methods"]["ncm"]["final_accuracy"]
    )
    code, _, err = run_cli(
        ["study", "incremental", "--data", clinc_dir, "--out", out, "--epochs-per-step", "2"], capsys
    )
    assert code == 2 and "other settings" in err and len(err.strip().splitlines()) == 1


def _context(clinc_dir, tmp_path) -> StudyContext:
    return StudyContext(IncrementalConfig(data_dir=str(clinc_dir), epochs_per_step=1), tmp_path / "ctx")


def test_ewc_penalty_is_zero_at_its_anchor_and_lwf_matches_its_own_teacher(clinc_dir, tmp_path):
    context = _context(clinc_dir, tmp_path)
    ewc = METHODS["ewc"](context)
    ewc.learn(0)
    rows = context.stream.rows("train", [1])[:8]
    assert all(v.sum() > 0 for v in ewc.fisher.values())
    with torch.no_grad():
        assert float(ewc.extra_loss(rows, None)) == 0.0  # θ = θ*
        next(iter(ewc.classifier.parameters())).add_(0.1)
        assert float(ewc.extra_loss(rows, None)) > 0.0
    lwf = METHODS["lwf"](context)
    lwf.learn(0)
    lwf.before_step(1)
    lwf.seen[list(context.stream.steps[1].classes)] = True
    lwf.backbone.eval()
    with torch.no_grad():
        logits = lwf.logits("train", rows)
        assert float(lwf.extra_loss(rows, logits)) == pytest.approx(0.0, abs=1e-6)  # the teacher is itself


def test_derpp_stores_each_example_with_its_logits(clinc_dir, tmp_path):
    context = _context(clinc_dir, tmp_path)
    derpp = METHODS["derpp_1000"](context)
    derpp.learn(0)
    count = len(derpp.buffer.rows)
    assert count == 48  # one epoch of step 0's 48 examples, under the buffer's size
    seen = derpp.stored_seen[:count]
    assert bool(seen.any(dim=1).all()) and int(seen.sum(dim=1).max()) == 3  # step 0's three classes
    assert derpp.kept().examples == 48 and derpp.kept().example_bytes > 48 * 3 * 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--method", "ewk"], "did you mean 'ewc'"),
        (["--protocol", "classes", "--classes-per-task", "5"], "fewer than 2 tasks"),
        (["--joint-steps", "4"], "the steps are 1..3"),
    ],
)
def test_bad_input_is_one_line(clinc_dir, tmp_path, capsys, argv, message):
    code, _, err = run_cli(["study", "incremental", "--data", clinc_dir, "--out", tmp_path / "x", *argv], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_owner_share_trains_only_on_its_own_data():
    projection = RandomProjection(ProjectionConfig(dim=8, width=0))
    h, y, labels = _owners()["a"]
    share = train_owner_share("a", labels, (h.float(), y), (h.float(), y), seed=3, projection=projection)
    again = train_owner_share("a", labels, (h.float(), y), (h.float(), y), seed=3, projection=projection)
    assert all(
        torch.equal(a, b) for a, b in zip(share.expert.state_dict().values(), again.expert.state_dict().values())
    )
    assert share.statistics.labels == labels and math.isclose(float(share.statistics.counts.sum()), 60)
