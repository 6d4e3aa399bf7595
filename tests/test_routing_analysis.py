"""`redkit analyze routing` on the tiny run: it writes its tables and figures under
<run>/analysis/routing/ without touching the run's modules, joins report.html, trains zoo routers
through the ordinary stages, monitors them, and refuses bad input with one line, exit code 2."""

import hashlib
import json
import shutil

import pytest
import torch
from conftest import run_cli

from redkit.compositions import ModuleSet, compose
from redkit.modules.layers import ROUTERS
from redkit.modules.store import read_meta
from redkit.run import open_run
from redkit_experiments.routing.analyze import AnalysisVariant, RoutingAnalysisConfig, router_variant
from redkit_experiments.routing.monitor import TrainingMonitor


def _hashes(directory):
    return {
        p.relative_to(directory): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def analysed(tiny_run, tmp_path_factory):
    run = tmp_path_factory.mktemp("routing") / "run"
    shutil.copytree(tiny_run, run)
    return run


def test_analyze_routing_writes_its_report_and_leaves_the_run_alone(analysed, capsys):
    before = _hashes(analysed / "modules")
    code, out, err = run_cli(
        [
            "analyze",
            "routing",
            "--run",
            analysed,
            "--router",
            "dense",
            "--router",
            "top2",
            "--router",
            "prototype",
            "--experts",
            "4",
            "--seeds",
            "2",
            "--max-epochs",
            "1",
            "--monitor-every",
            "1",
            "--repeats",
            "2",
        ],
        capsys,
    )
    assert code == 0, err
    assert _hashes(analysed / "modules") == before
    directory = analysed / "analysis" / "routing"
    result = json.loads((directory / "results.json").read_text())
    assert result["routers"] == ["dense", "top2", "prototype"] and result["roles"] == ["router", "gate"]
    red = result["metrics"]["routers"]["top2"]["roles"]["router"]
    assert red["k"] == 2 and red["active_experts"] == pytest.approx(2.0) and 0 <= red["accuracy"] <= 1
    assert sum(red["load_topk"]) == 2 * result["n"]
    assert result["metrics"]["routers"]["dense"]["dynamics"], "the monitor logged nothing while the router trained"
    itself = result["metrics"]["routers"]["dense"]["roles"]["gate"]["vs_reference"]
    assert itself == {"only_a": 0, "only_b": 0, "p": 1.0, "reference": "dense"}  # McNemar against dense: itself
    assert result["metrics"]["routers"]["top2"]["roles"]["router"]["vs_reference"]["reference"] == "dense"
    assert result["stability"]["prototype"] == {"deterministic": True}
    assert len(result["stability"]["dense"]["pairs"]) == 1 and 0 <= result["stability"]["dense"]["agreement"] <= 1
    assert set(result["scaling"]["4"]["routers"]) == {"dense", "top2", "prototype"}
    assert list(result["overhead"]["dense"]["components"]) == [
        "router forward",
        "selection",
        "expert forward",
        "combination",
    ]
    for figure in ("usage", "affinity", "dynamics_router", "gram", "scaling"):
        assert (directory / "figures" / f"{figure}.png").stat().st_size > 1000
    report = (directory / "report.md").read_text()
    assert "## Routing metrics (primary)" in report and "| top2 | RED router | 2 |" in report and "(McNemar)" in report
    assert 'id="analysis-routing"' in (analysed / "report.html").read_text()
    # the variants are complete modules of the right kind, under the analysis directory
    assert read_meta(directory / "routers" / "top2" / "modules" / "router").kind == "router_top2"
    assert read_meta(directory / "scaling" / "K4" / "prototype" / "modules" / "gate").kind == "router_prototype"


def test_the_readme_command_runs_every_router_and_part_end_to_end(tiny_run, tmp_path, capsys):
    """`redkit analyze routing --run RUN` exactly as the README gives it: every router of the zoo (the
    label routers read the global head, which a scaling variant with K experts takes from the run), every
    part, every K of the scaling."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    code, out, err = run_cli(["analyze", "routing", "--run", run], capsys)
    assert code == 0, err
    result = json.loads((run / "analysis" / "routing" / "results.json").read_text())
    assert result["routers"] == ROUTERS.names() and set(result["seconds_per_part"]) == {
        "metrics",
        "stability",
        "scaling",
        "overhead",
    }
    assert list(result["scaling"]) == ["4", "8", "16", "32"]
    for k in ("4", "8", "16", "32"):
        assert set(result["scaling"][k]["routers"]) == set(ROUTERS.names()), k
    for name in ("labels", "dense_labels"):  # the routers that read the global head
        assert 0 <= result["scaling"]["32"]["routers"][name]["roles"]["router"]["accuracy"] <= 1
    assert not (
        run / "analysis" / "routing" / "scaling" / "K4" / "experts" / "modules" / "heads" / "global_full"
    ).exists()
    assert "## Routing metrics (primary)" in out


def test_dense_router_trained_by_the_analysis_is_the_runs_own(tiny_run, tmp_path):
    """Same seed, same stage code, no caps: the dense router the analysis trains equals the run's, bit
    for bit (the --router option left the default path unchanged)."""
    run = open_run(tiny_run)
    uncapped = RoutingAnalysisConfig(train_examples=0, max_epochs=0)
    variant, _ = router_variant(run, tmp_path / "dense", "dense", ["router"], uncapped)
    mine, theirs = ModuleSet(variant).router(), ModuleSet(run).router()
    for (name, a), (_, b) in zip(mine.state_dict().items(), theirs.state_dict().items()):
        assert torch.equal(a, b), name


def test_a_quick_analysis_trains_on_a_fixed_subset_of_train_only(tiny_run, tmp_path):
    run = open_run(tiny_run)
    config = RoutingAnalysisConfig(train_examples=100, max_epochs=2)
    a, b = (AnalysisVariant(run, tmp_path / name, ("router",), config) for name in "ab")
    h, _, d = a.split_tensors("train")
    assert len(h) == 100 and torch.equal(h, b.split_tensors("train")[0])  # the same rows every time
    assert len(a.split_tensors("val")[0]) == len(run.split_tensors("val")[0])
    assert a.config.train_config("router").max_epochs == 2  # the cap is the variant's, the run's config is untouched
    full = run.split_tensors("train")[0]
    assert all((full == row).all(dim=1).any() for row in h[:5])  # rows of the run's own train split


def test_zoo_router_as_red_router_and_moe_gate_through_the_stages(tiny_run, tmp_path):
    run = open_run(tiny_run)
    variant, _ = router_variant(
        run, tmp_path / "switch", "switch", ["router", "gate"], RoutingAnalysisConfig(max_epochs=1)
    )
    modules = ModuleSet(variant)
    h, _, d = run.split_tensors("test")
    for name in ("red", "moe"):
        composed = compose(name, modules, h, d)
        assert ((composed.weights > 0).sum(dim=1) == 1).all()  # top-1: one expert per example, weight p_i (Switch)
        assert (composed.weights.sum(dim=1) < 1).all()
        total = composed.probs.sum(dim=1)  # RED: softmax of C(h + p_i Δh_i); MoE: p_i softmax(E_i(h))
        assert torch.allclose(total, torch.ones(len(h)) if name == "red" else composed.weights.sum(dim=1), atol=1e-5)


def test_monitor_logs_every_n_steps_without_changing_training(tiny_run, tmp_path):
    run = open_run(tiny_run)
    plain, _ = router_variant(run, tmp_path / "plain", "loss_free", ["router"], RoutingAnalysisConfig(max_epochs=2))
    watched, _ = router_variant(
        run,
        tmp_path / "watched",
        "loss_free",
        ["router"],
        RoutingAnalysisConfig(max_epochs=2, monitor_every=2),
        monitor=True,
    )
    rows = [json.loads(line) for line in (tmp_path / "watched" / "log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r.get("event") == "routing"]
    assert steps and all(s % 2 == 0 for s in steps) and steps == sorted(steps)
    assert {"entropy", "cv", "max_vio", "routed_accuracy"} <= set(next(r for r in rows if r.get("event") == "routing"))
    a, b = ModuleSet(plain).router().state_dict(), ModuleSet(watched).router().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # watching changed nothing, the loss-free bias included
    assert isinstance(TrainingMonitor(run, every=5).measure(ModuleSet(run).router()), dict)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--router", "swich"], "did you mean 'switch'"),
        (["--part", "metric"], "unknown part"),
        (["--seeds", "1"], "at least 2 seeds"),
        (["--train-examples", "-1"], "0 (no cap) or more"),
        (["--split", "tset"], "no such split"),
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_run, capsys, argv, message):
    code, out, err = run_cli(["analyze", "routing", "--run", tiny_run, *argv], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_run_without_a_router_is_one_line_exit_2(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("router"))
    code, out, err = run_cli(["analyze", "routing", "--run", run, "--part", "metrics"], capsys)
    assert code == 2 and "no trained router" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["analyze", "routng", "--run", run], capsys)
    assert code == 2 and "did you mean 'routing'" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["reproduce", "task1", "--router", "top3"],
        ["reproduce", "steps", "--router", "top3"],
        ["add-expert", "--router", "top3", "--run"],
    ],
)
def test_an_unknown_router_option_fails_before_anything_is_written(tmp_path, capsys, argv):
    out = tmp_path / "new"
    argv = argv + ([out] if argv[-1] == "--run" else ["--out", out])
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "did you mean 'top2'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
