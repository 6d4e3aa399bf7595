"""End to end on tiny configs: a tiny random Qwen3 goes through the same loader and pipeline;
finished stages are not redone; an expert retrained alone, in its own command, is bit-identical."""

import json
import shutil

import pytest
from safetensors.torch import load_file
from test_backbone import make_tiny_qwen3

from redkit.cli import main
from redkit.compositions import COMPOSITIONS


@pytest.fixture(scope="module")
def qwen_run(tmp_path_factory):
    model = make_tiny_qwen3(tmp_path_factory.mktemp("qwen3"))
    out = tmp_path_factory.mktemp("runs") / "qwen"
    argv = [
        "reproduce",
        "task1",
        "--n",
        "300",
        "--max-epochs",
        "2",
        "--backbone",
        str(model),
        "--out",
        str(out),
        "--pooling",
        "last",
        "--trainable-layers",
        "1",
    ]
    assert main(argv) == 0
    return out, argv


def test_qwen3_run_evaluates_every_composition(qwen_run):
    out, _ = qwen_run
    results = json.loads((out / "results.json").read_text())
    assert set(results["splits"]["test"]) == set(COMPOSITIONS.names())
    for metrics in results["splits"]["test"].values():
        assert 0.0 <= metrics["accuracy"] <= 1.0 and set(metrics["per_range"]) == {"R1", "R2", "R3", "R4", "R5"}
    assert set(results["router"]) == {"train", "val", "test"}
    assert results["config"]["backbone"]["pooling"] == "last"
    assert results["provenance"]["versions"]["torch"]
    top = json.loads((out / "modules" / "backbone_top" / "config.json").read_text())
    assert top["config"]["dim"] == 64 and top["config"]["split_at"] == 2
    assert (out / "report.md").read_text().count("|") > 50 and (out / "figures" / "per_range_accuracy.png").is_file()


def test_rerun_redoes_no_finished_stage(qwen_run):
    out, argv = qwen_run
    epochs_before = (out / "log.jsonl").read_text().count('"epoch"')
    timings_before = json.loads((out / "timings.json").read_text())
    assert main(argv) == 0
    assert (out / "log.jsonl").read_text().count('"epoch"') == epochs_before
    timings = json.loads((out / "timings.json").read_text())
    assert timings["base"] == timings_before["base"]


def test_rerun_with_other_settings_is_refused(qwen_run, capsys):
    out, argv = qwen_run
    assert main(argv[:-1] + ["2"] + ["--seed", "9"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_one_expert_retrained_alone_is_identical(qwen_run, tmp_path):
    out, _ = qwen_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    expert = copy / "modules" / "experts" / "residual" / "R3"
    original = load_file(str(expert / "model.safetensors"))
    shutil.rmtree(expert)
    assert main(["train", "experts", "--run", str(copy), "--domain", "R3", "--kind", "residual"]) == 0
    retrained = load_file(str(expert / "model.safetensors"))
    assert original.keys() == retrained.keys()
    assert all((original[k] == retrained[k]).all() for k in original)
    assert json.loads((expert / "config.json").read_text())["domain"] == 2


def test_same_seed_same_base_whatever_ran_before(qwen_run, tmp_path):
    """Stage base seeds its own initialisation: torch's global RNG state before it does not matter."""
    import torch

    out, argv = qwen_run
    torch.manual_seed(12345)
    torch.rand(1000)  # consume random numbers, as other code in the same process might
    again = tmp_path / "again"
    assert main([*argv[: argv.index("--out")], "--out", str(again), *argv[argv.index("--out") + 2 :]]) == 0
    for module in ("classifier", "backbone_top", "experts/residual/R2", "router"):
        first = load_file(str(out / "modules" / module / "model.safetensors"))
        second = load_file(str(again / "modules" / module / "model.safetensors"))
        assert all(torch.equal(first[k], second[k]) for k in first), module
