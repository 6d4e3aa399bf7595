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
from redkit.incremental.ridge import ridge_weights
from redkit.incremental.statistics import ClassStatistics, merge
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.methods.klda import KLDA
from redkit_experiments.incremental.methods.ranpac import RanPAC
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
    with pytest.MonkeyPatch.context() as patch:  # the random maps' widths cut to the tiny set (D 5,000, M 10,000)
        patch.setattr(KLDA, "width", 256)
        patch.setattr(RanPAC, "width", 512)
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


def test_the_ridge_from_statistics_is_ranpacs_ridge_from_the_features():
    """W = (ΦᵀΦ + λI)⁻¹ ΦᵀY from every owner's features pooled, against ridge.py's from their merged statistics."""
    owners = _owners()
    stats = merge({name: ClassStatistics.of(h, y, labels) for name, (h, y, labels) in owners.items()})
    h = torch.cat([owners[name][0] for name in sorted(owners)])  # merge lays owners out by name
    classes = torch.cat([owners[name][1] + 2 * k for k, name in enumerate(sorted(owners))])
    targets = torch.nn.functional.one_hot(classes, 6).double()
    gram = h.T @ h
    ridge = 0.3 * torch.trace(gram) / 8
    direct = torch.linalg.solve(gram + ridge * torch.eye(8, dtype=torch.float64), h.T @ targets).T  # (C, d)
    assert torch.allclose(ridge_weights(stats, relative=0.3), direct, rtol=1e-7, atol=1e-9)


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
    data, published = read_data(clinc_dir)
    assert published is None  # CLINC150 publishes no order of its classes: the classes protocol groups at random
    domains = build_stream(data, "domains", order=0)
    assert sorted(s.name for s in domains.steps) == ["banking", "cooking", "travel"]
    assert all(len(s.classes) == 3 for s in domains.steps)
    other = build_stream(data, "domains", order=1)
    assert {s.name: s.classes for s in other.steps} == {s.name: s.classes for s in domains.steps}
    # the same data in another order is another stream; read again (from anywhere), the same one
    assert other.fingerprint() != domains.fingerprint() == build_stream(data, "domains", order=0).fingerprint()
    classes = build_stream(data, "classes", order=0, classes_per_task=3)
    assert sorted(c for s in classes.steps for c in s.classes) == list(range(9))
    assert {s.classes for s in classes.steps} == {s.classes for s in build_stream(data, "classes", 5, 3).steps}
    rows = classes.rows("train", [0])
    assert set(classes.class_of["train"][rows].tolist()) == set(classes.steps[0].classes)
    with pytest.raises(RedkitError, match="fewer than 2 tasks"):
        build_stream(data, "classes", 0, classes_per_task=5)
    labels = sorted(set(classes.labels))
    zheng = build_stream(data, "classes", 0, 3, class_order=tuple(reversed(labels)))  # a published order
    assert [[classes.classes[c] for c in s.classes] for s in zheng.steps] == [
        sorted(labels[6:]),
        sorted(labels[3:6]),
        sorted(labels[:3]),
    ]
    with pytest.raises(RedkitError, match="published order"):
        build_stream(data, "classes", 1, 3, class_order=tuple(labels))


def test_reservoir_keeps_every_item_about_as_often():
    kept = torch.zeros(100)
    for seed in range(300):
        reservoir = Reservoir(10, seed)
        for row in range(100):
            reservoir.offer(row)
        assert len(reservoir.items) == 10 and reservoir.seen == 100
        kept[reservoir.items] += 1
    assert kept.min() > 10 and kept.max() < 55  # each about 300 * 10 / 100 = 30 times


def test_the_study_writes_every_method_with_what_it_keeps(studied):
    results = json.loads((studied / "results.json").read_text())
    assert results["protocol"] == "domains" and results["order"] == 0 and len(results["steps"]) == 3
    assert set(results["methods"]) == set(METHODS.names())
    for name, m in results["methods"].items():
        assert len(m["per_step"]) == 3 and {"stored_examples", "stored_bytes", "seconds"} <= set(m), name
        assert m["stored_from_data_bytes"] <= m["stored_bytes"], name
        if name != "joint":  # the metrics, from the accuracies after each step, by hand
            acc = [r["accuracy_by_step"] for r in m["per_step"]]
            seen = [r["seen_accuracy"] for r in m["per_step"]]
            assert [len(a) for a in acc] == [1, 2, 3]
            assert m["final_accuracy"] == seen[2]
            assert m["average_incremental_accuracy"] == pytest.approx((seen[0] + seen[1] + seen[2]) / 3)
            drops = [max(acc[0][0], acc[1][0]) - acc[2][0], acc[1][1] - acc[2][1]]
            assert m["forgetting"] == pytest.approx((drops[0] + drops[1]) / 2), name
            assert m["backward_transfer"] == pytest.approx(((acc[2][0] - acc[0][0]) + (acc[2][1] - acc[1][1])) / 2)
        assert {"in_scope_accuracy", "oos_recall", "auroc"} <= set(m["oos"]), name
    methods = results["methods"]
    assert methods["red"]["stored_examples"] == 0 and methods["finetune"]["stored_bytes"] == 0
    assert methods["red"]["stored_from_data_bytes"] == methods["red"]["stored_bytes"] > 0  # statistics: data
    assert methods["lwf"]["stored_from_data_bytes"] == 0 < methods["lwf"]["stored_bytes"]  # weights: not data
    assert methods["er_200"]["stored_examples"] == 144 and methods["red_replay"]["stored_examples"] == 144 + 36
    assert methods["joint"]["per_step"][-1]["seen_accuracy"] == methods["joint"]["final_accuracy"]
    assert "seen_accuracy" not in methods["joint"]["per_step"][0]  # joint retrained at the last step only
    assert (studied / "figures" / "accuracy_by_step.png").stat().st_size > 5000
    assert "| **red** |" in (studied / "report.md").read_text()


# klda and ranpac are not: KLDA's σ is chosen on the first step's val, RanPAC's λ on the last step's train
ORDER_FREE = ("red", "red_tuned", "simplecil", "gaussian")


def test_order_free_methods_give_the_same_scores_whatever_the_order(clinc_dir, studied, tmp_path):
    """The final models of two orders score every test query identically (the same bits)."""
    scores = {}
    for order in (0, 1):
        config = IncrementalConfig(data_dir=str(clinc_dir), order=order, epochs_per_step=1)
        context = StudyContext(config, studied)  # the study's cache: nothing encoded again
        scores[order] = {}
        for name in ORDER_FREE:
            method = METHODS[name](context.setting)
            for t in range(len(context.stream.steps)):
                method.learn(context.step_data(t))
            scores[order][name] = method.scores(context.queries("test"))
        steps = [s.name for s in context.stream.steps]
        scores[order]["steps"] = steps
    assert scores[0]["steps"] != scores[1]["steps"]  # the orders differ ...
    for name in ORDER_FREE:  # ... the answers do not
        assert torch.equal(scores[0][name], scores[1][name]), name


def test_simplecil_final_accuracy_is_nearest_mean_by_hand(clinc_dir, studied):
    """The study's scoring against an independent computation of nearest-class-mean accuracy on the cache."""
    context = StudyContext(IncrementalConfig(data_dir=str(clinc_dir), epochs_per_step=1), studied)
    stream, h = context.stream, context.features
    means = torch.stack([h["train"][stream.class_of["train"] == c].mean(0) for c in range(len(stream.classes))])
    cosine = torch.nn.functional.normalize(h["test"], dim=1) @ torch.nn.functional.normalize(means, dim=1).T
    by_hand = float((cosine.argmax(1) == stream.class_of["test"]).float().mean())
    final = json.loads((studied / "results.json").read_text())["methods"]["simplecil"]["final_accuracy"]
    assert final == pytest.approx(by_hand, abs=1e-12)


@pytest.mark.slow
def test_a_method_reads_only_the_step_it_is_learning(clinc_dir, tmp_path, monkeypatch):
    """What a method is handed at step t is step t's train and val rows, and to score, queries without classes."""
    from redkit_experiments.incremental.study import run_method

    received = []

    class Spy(METHODS["simplecil"]):
        def learn(self, step):
            received.append(step)
            with pytest.raises(RedkitError, match="train and val examples only"):
                step["test"]
            super().learn(step)

        def scores(self, queries):
            assert queries.classes is None  # a query's class is not the method's to read
            return super().scores(queries)

    context = _context(clinc_dir, tmp_path)
    monkeypatch.setitem(METHODS._entries, "spy", Spy)
    run_method("spy", context)
    stream = context.stream
    assert [s.t for s in received] == [0, 1, 2]
    for step in received:
        for split in ("train", "val"):
            rows = stream.rows(split, [step.t])
            assert step[split].texts == tuple(stream.texts[split][i] for i in rows.tolist())
            assert set(step[split].classes.tolist()) == set(stream.steps[step.t].classes)
    assert not any(hasattr(context.setting, name) for name in ("features", "prefix", "stream"))


def test_a_rerun_reads_finished_methods_back(clinc_dir, studied, tmp_path, monkeypatch, capsys):
    out = tmp_path / "again"
    shutil.copytree(studied, out)
    (out / "methods" / "simplecil.json").unlink()  # as if the study had been stopped while it trained
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
    assert trained == ["simplecil"] * 3  # every other method read back, not trained again
    again = json.loads((out / "results.json").read_text())["methods"]
    assert (
        again["simplecil"]["final_accuracy"]
        == json.loads((studied / "results.json").read_text())["methods"]["simplecil"]["final_accuracy"]
    )
    code, _, err = run_cli(
        ["study", "incremental", "--data", clinc_dir, "--out", out, "--epochs-per-step", "2"], capsys
    )
    assert code == 2 and "other settings" in err and len(err.strip().splitlines()) == 1
    ncm = out / "methods" / "simplecil.json"
    made = json.loads(ncm.read_text())
    assert made["code"]["source"] and made["settings"]["epochs_per_step"] == 1
    ncm.write_text(json.dumps(made | {"code": made["code"] | {"source": "0" * 64}}))  # as if older code made it
    code, _, err = run_cli(["study", "incremental", "--data", clinc_dir, "--out", out, *QUICK], capsys)
    assert code == 2 and "made by other code" in err and len(err.strip().splitlines()) == 1


def _context(clinc_dir, tmp_path) -> StudyContext:
    return StudyContext(IncrementalConfig(data_dir=str(clinc_dir), epochs_per_step=1), tmp_path / "ctx")


@pytest.mark.slow
def test_ewc_fisher_is_per_example_and_decays_online(clinc_dir, tmp_path, monkeypatch):
    context = _context(clinc_dir, tmp_path)
    gamma = 0.5
    monkeypatch.setitem(context.config.hyperparameters, "ewc", {"lambda": 1e5, "gamma": gamma})
    ewc = METHODS["ewc"](context.setting)
    step0 = context.step_data(0)
    ewc.learn(step0)
    first = {name: f.clone() for name, f in ewc.fisher.items()}
    # by hand: each example's own squared gradient, averaged (not the square of the mean gradient)
    name, p = next((n, p) for n, p in ewc.trainable.named_parameters() if n.startswith("classifier"))
    squares, grads = [], []
    for n in range(len(step0.train)):
        example = step0.train.subset([n])
        ewc.trainable.zero_grad()
        ewc.cross_entropy(ewc.logits(example), example.classes).backward()
        squares.append(p.grad.detach() ** 2)
        grads.append(p.grad.detach().clone())
    assert torch.allclose(first[name], torch.stack(squares).mean(0), rtol=1e-5, atol=1e-12)
    assert not torch.allclose(first[name], torch.stack(grads).mean(0) ** 2, rtol=1e-2)
    with torch.no_grad():
        assert float(ewc.extra_loss(None, None)) == 0.0  # θ = θ*
        next(iter(ewc.classifier.parameters())).add_(0.1)
        assert float(ewc.extra_loss(None, None)) > 0.0
    step1 = context.step_data(1)
    ewc.learn(step1)
    from redkit_experiments.incremental.methods.ewc import empirical_fisher

    second = empirical_fisher(ewc, step1)
    assert torch.allclose(ewc.fisher[name], gamma * first[name] + second[name], rtol=1e-5, atol=1e-12)


@pytest.mark.slow
def test_lwf_matches_its_own_teacher_and_keeps_only_the_last(clinc_dir, tmp_path):
    import gc
    import weakref

    context = _context(clinc_dir, tmp_path)
    lwf = METHODS["lwf"](context.setting)
    lwf.learn(context.step_data(0))
    step1 = context.step_data(1)
    lwf.before_step(step1)
    lwf.seen[list(step1.classes)] = True
    batch = step1.train.subset(range(8))
    with torch.no_grad():
        assert float(lwf.extra_loss(batch, lwf.logits(batch))) == pytest.approx(0.0, abs=1e-6)  # itself
    lwf.learn(step1)
    first_teacher = weakref.ref(lwf.teacher)
    size = lwf.kept().weight_bytes
    lwf.learn(context.step_data(2))
    gc.collect()
    assert first_teacher() is None  # the teacher of step 2 does not hold the one of step 1
    assert lwf.kept().weight_bytes == size


@pytest.mark.slow
def test_derpp_stores_each_example_with_its_logits(clinc_dir, tmp_path):
    context = _context(clinc_dir, tmp_path)
    derpp = METHODS["derpp_1000"](context.setting)
    derpp.learn(context.step_data(0))
    count = len(derpp.buffer.items)
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


def test_banking77_is_read_as_published_with_zheng_et_als_grouping(tmp_path):
    """text,category CSVs and categories.json (PolyAI's layout): a val carved per intent with a fixed seed, and
    the classes protocol cut in runs of the published order."""
    order = [f"intent_{i}" for i in (3, 0, 5, 1, 4, 2)]  # not alphabetical, as BANKING77's
    for split, per in (("train", 10), ("test", 2)):
        lines = ["text,category"] + [f"query {split} {k} of {c},{c}" for c in order for k in range(per)]
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "categories.json").write_text(json.dumps(order))
    data, published = read_data(tmp_path)
    assert published == tuple(order) and len(data.splits["val"]) == 6 and len(data.splits["train"]) == 54
    stream = build_stream(data, "classes", 0, 2, published)
    assert [tuple(stream.classes[c] for c in s.classes) for s in stream.steps] == [
        tuple(sorted(order[i : i + 2])) for i in (0, 2, 4)
    ]
    again, _ = read_data(tmp_path)
    assert [r.question for r in again.splits["val"]] == [r.question for r in data.splits["val"]]


@pytest.mark.slow
def test_the_tuning_stream_chooses_on_val_and_never_reads_test(clinc_dir, tmp_path, monkeypatch, capsys):
    from redkit_experiments.incremental import tuning

    monkeypatch.setattr(tuning, "OWN", {"ewc": {"lambda": (1e5, 1e2), "gamma": (1.0,)}})
    read = []
    original = StudyContext.queries
    monkeypatch.setattr(
        StudyContext, "queries", lambda self, split, rows=None: read.append(split) or original(self, split, rows)
    )
    out = tmp_path / "tune"
    argv = ["study", "incremental-tune", "--data", clinc_dir, "--out", out, "--order", "1", "--steps", "2"]
    argv += ["--method", "finetune", "--method", "ewc", "--lr", "1e-3", "--lr", "1e-2", "--epochs", "1"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    tuned = json.loads((out / "tuned.json").read_text())
    assert set(read) == {"val"}  # scored on the tuning stream's val only
    assert len(tuned["stream"]["steps"]) == 2 and "incremental-tune" in tuned["command"]
    rows = tuned["search"]
    # 2 rates each; then EWC's other λ at its best rate (its λ = 1e5 there already scored)
    assert [r["method"] for r in rows] == ["finetune"] * 2 + ["ewc"] * 3
    for name in ("finetune", "ewc"):
        mine = [r for r in rows if r["method"] == name]
        best = max(mine, key=lambda r: r["final_accuracy"])  # the first of equals, as the search keeps it
        assert tuned["chosen"][name] == best["values"]
    at_best_rate = [r["values"] for r in rows[2:] if r["values"]["lr"] == tuned["chosen"]["ewc"]["lr"]]
    assert {v["lambda"] for v in at_best_rate} == {1e5, 1e2}
