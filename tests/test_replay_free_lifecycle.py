"""The replay-free life cycle of a fit run (`--router gaussian`, redkit/routers/gaussian.py): a run switched
to the router built from every domain's class statistics as a domain is added, then an expert sent with its
modules only (no data) added to it, through the CLI and through `redkit serve`'s POST /v1/domains, on the
generated topics set (3 domains x 3 intents; health and tech each bring 3 intents of their own)."""

import contextlib
import hashlib
import io
import json
from pathlib import Path

import httpx
import pytest
import torch
from conftest import run_cli
from test_lifecycle import domain_data

from redkit.fitting.topics import write_topics

# As tests/test_lifecycle.py, for the same reasons; no references (joint, linear probe): nothing here reads them and a
# derived run has none (they took a third of the fixture's time).
FIT_ARGS = ("--max-epochs", "8", "--base-fraction", "0.1", "--references")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A dense-router run of 3 domains; health added with --router gaussian (the switch); that run's bundle; tech's
    expert trained from the bundle with --modules-only; and tech added from it."""
    from redkit.cli import main

    root = tmp_path_factory.mktemp("replay_free")
    data = write_topics(root / "topics", train=180, val=0, test=60, domains=3, labels_per_domain=3)
    health, tech = domain_data(root / "health", "health"), domain_data(root / "tech", "tech")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["fit", "--data", str(data), "--out", str(root / "run"), *FIT_ARGS]) == 0
        switch = ["add-domain", "--run", str(root / "run"), "--data", str(health), "--router", "gaussian"]
        assert main([*switch, "--out", str(root / "switched")]) == 0
        assert main(["export", "--run", str(root / "switched"), "--out", str(root / "bundle")]) == 0
        expert = ["train-expert", "--bundle", str(root / "bundle"), "--data", str(tech), "--modules-only"]
        assert main([*expert, "--out", str(root / "experts" / "tech")]) == 0
        plug = ["add-domain", "--run", str(root / "switched"), "--expert", str(root / "experts" / "tech")]
        assert main([*plug, "--out", str(root / "added")]) == 0
    return {"root": root, "printed": printed.getvalue()} | {
        name: root / name for name in ("run", "switched", "bundle", "added", "experts")
    }


def test_domain_scores_are_the_log_sum_exp_of_each_domains_classes():
    from redkit.incremental.gaussian import domain_scores

    scores = torch.randn(5, 7, dtype=torch.float64) * 30
    classes = torch.tensor([2, 0, 0, 1, 2, 2, 0])
    want = torch.stack([torch.logsumexp(scores[:, classes == k], dim=1) for k in range(4)], dim=1)
    got = domain_scores(scores, classes, 4)
    assert torch.allclose(got[:, :3], want[:, :3]) and torch.isneginf(got[:, 3]).all()  # domain 3 has no class


def test_switching_computes_each_old_domains_statistics_from_its_own_data(world):
    switched = world["switched"]
    config = json.loads((switched / "config.json").read_text())
    assert config["router"] == "gaussian" and config["domains"][-1] == "health"
    for k, domain in enumerate(config["domains"]):
        meta = json.loads((switched / "modules" / "statistics" / domain / "config.json").read_text())
        counts = json.loads((switched / "data" / "splits.json").read_text())["splits"]["train"]["per_domain"][domain]
        assert meta["domain"] == k and meta["metrics"]["examples"] == counts  # its own examples, nobody else's
        assert all(label.startswith(f"{domain}/") for label in meta["config"]["labels"])
    for role in ("router", "gate"):
        meta = json.loads((switched / "modules" / role / "config.json").read_text())
        assert meta["kind"] == "router_gaussian" and meta["metrics"]["epochs"] == 0
    results = json.loads((switched / "results.json").read_text())
    statement = " ".join(results["lifecycle"]["statement"])
    assert f"computed here for {', '.join(config['domains'])}; the others copied" in statement
    table = results["lifecycle"]["before_after"]["test"]["red"]
    assert table["health"][1] >= 0.5
    # a router from statistics of a tuned backbone's features routes as well as the trained one here
    assert results["splits"]["test"]["red"]["accuracy"] >= 0.8


def test_the_bundle_serves_the_router_without_the_statistics(world):
    bundle = world["bundle"]
    assert (bundle / "modules" / "router" / "model.safetensors").is_file()
    assert not (bundle / "modules" / "statistics").exists()  # 33 MB a domain at full width; only the run keeps them
    assert (bundle / "serving" / "model.onnx").is_file()  # export checked it against the run (1e-4) on a batch of 3


def test_an_expert_sent_with_its_modules_only_carries_no_example(world):
    expert = world["experts"] / "tech"
    description = json.loads((expert / "expert.json").read_text())
    assert description["modules_only"] is True and sum(description["examples"].values()) == 80  # train, val, test
    assert sorted(p.name for p in (expert / "data").iterdir()) == ["splits.json"]
    assert "modules/statistics/tech/model.safetensors" in description["files"]
    assert not any("data/" in f and f.endswith(".jsonl") for f in description["files"])


def test_it_joins_the_run_copying_every_old_module_and_reading_no_data(world):
    switched, added = world["switched"], world["added"]
    results = json.loads((added / "results.json").read_text())
    change = results["lifecycle"]
    assert change["replay_free"] and change["modules_only"] and change["frozen_modules_unchanged"]
    for domain in ("banking", "travel", "cooking", "health"):  # the statistics travel as modules, unchanged
        module = f"statistics/{domain}"
        assert change["frozen_modules"][module] == _sha(switched / "modules" / module / "model.safetensors")
    assert _sha(added / "modules" / "statistics" / "tech" / "model.safetensors") == _sha(
        world["experts"] / "tech" / "modules" / "statistics" / "tech" / "model.safetensors"
    )
    assert "sent its modules only" in (added / "report.md").read_text()
    assert "every one copied: no domain's data read" in " ".join(change["statement"])
    assert json.loads((added / "config.json").read_text())["added_data"][-1] == str(world["experts"] / "tech")
    assert "tech" not in results["splits"]["test"]["red"]["by_domain"]  # its test examples stay with its owner


def test_the_added_domain_is_routed_to_and_answers_its_new_labels(world):
    import redkit

    predictions = redkit.load(world["added"]).predict(["factory reset the laptop", "my phone won't connect to wifi"])
    assert [p.label for p in predictions] == ["reset", "connect"]
    assert all(max(p.weights, key=p.weights.get) == "tech" for p in predictions)


def test_adding_a_modules_only_expert_reads_no_training_example(world, tmp_path, monkeypatch):
    """The whole add, router and gate included, with every run's training split made unreadable to anything
    but the evaluation of the finished run (which scores the router on every split the run holds)."""
    import sys

    from redkit.run.text import TextRun

    original = TextRun.split_tensors

    def no_training(self, name):
        frame, callers = sys._getframe(1), set()
        while frame is not None:
            callers.add(frame.f_code.co_name)
            frame = frame.f_back
        assert name != "train" or "evaluate_run" in callers, "add-domain built something from training examples"
        return original(self, name)

    monkeypatch.setattr(TextRun, "split_tensors", no_training)
    from redkit.lifecycle.add import add_domain

    with contextlib.redirect_stdout(io.StringIO()):
        add_domain(world["switched"], expert_dir=world["experts"] / "tech", out=tmp_path / "again", print_fn=print)
    for role in ("router", "gate"):  # the same modules as the CLI's add
        assert _sha(tmp_path / "again" / "modules" / role / "model.safetensors") == _sha(
            world["added"] / "modules" / role / "model.safetensors"
        )


def test_modules_only_is_refused_where_the_router_trains_on_every_domain(world, tmp_path, capsys):
    assert run_cli(["export", "--run", world["run"], "--out", tmp_path / "dense"], capsys)[0] == 0
    argv = ["train-expert", "--bundle", tmp_path / "dense", "--data", world["root"] / "tech", "--modules-only"]
    code, _, err = run_cli([*argv, "--out", tmp_path / "expert"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--router gaussian" in err
    assert not (tmp_path / "expert").exists()


def test_serve_adds_a_domain_whose_owner_sent_only_its_modules(world, tmp_path):
    from test_serve import AUTH, server

    from redkit.serve.main import ServeConfig

    config = ServeConfig(
        bundle=str(world["bundle"]),
        run=str(world["switched"]),
        admin=True,
        experts_dir=str(world["experts"]),
        work=str(tmp_path / "work"),
    )
    with server(config) as running:
        added = httpx.post(running.url + "/v1/domains", json={"expert": "tech"}, headers=AUTH, timeout=300)
        assert added.status_code == 200, added.text
        assert added.json()["model"]["domains"][-1] == "tech"
        answer = httpx.post(running.url + "/v1/predict", json={"texts": ["factory reset the laptop"]}, timeout=60)
    assert answer.json()["predictions"][0]["label"] == "reset"
