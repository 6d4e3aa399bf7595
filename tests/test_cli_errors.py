"""Every error a user can cause, through the real CLI entry point: exit code 2, exactly one line on
stderr that starts with `redkit: error:` and names the file, line or field, and no traceback.
Also the two happy paths that read a trained run: `predict` and `eval`."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY_RUN_ARGS, run_cli

from redkit.compositions import COMPOSITIONS
from redkit_experiments.arithmetic.vocabulary import SHORT_NAMES


def expect_error(argv: list, capsys) -> str:
    """Run the CLI, check the error contract, and return the message after `redkit: error: `."""
    code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in out + err
    assert code == 2, f"exit code {code}; stderr: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"stderr is not one line: {err!r}"
    assert lines[0].startswith("redkit: error: ")
    return lines[0][len("redkit: error: ") :]


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    """A private copy of the shared tiny run, free to damage."""
    return Path(shutil.copytree(tiny_run, tmp_path / "run"))


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


GOOD = {"question": "What is 2 plus 3?", "answer": 5}


# ---- (a)-(c) bad data files -------------------------------------------------------------------------------


def test_eval_malformed_jsonl_line(tiny_run, tmp_path, capsys):
    bad = write_lines(tmp_path / "bad.jsonl", [GOOD, GOOD, '{"question": "What is 2 plus 4?", "answer": 6', GOOD])
    message = expect_error(["eval", "--run", tiny_run, "--data", bad], capsys)
    assert f"{bad}:3" in message and "malformed JSON" in message


def test_eval_answer_outside_vocabulary(tiny_run, tmp_path, capsys):
    bad = write_lines(tmp_path / "oov.jsonl", [GOOD, {"question": "What is 100 plus 50?", "answer": 150}])
    message = expect_error(["eval", "--run", tiny_run, "--data", bad], capsys)
    assert f"{bad}:2" in message and "'answer'" in message and "150" in message and "2..100" in message


def test_eval_unknown_domain(tiny_run, tmp_path, capsys):
    bad = write_lines(tmp_path / "dom.jsonl", [{"question": "What is 2 plus 3?", "answer": 5, "domain": "range_0_20"}])
    message = expect_error(["eval", "--run", tiny_run, "--data", bad], capsys)
    assert f"{bad}:1" in message and "'domain'" in message and "range_0_20" in message


def test_eval_missing_data_file(tiny_run, tmp_path, capsys):
    message = expect_error(["eval", "--run", tiny_run, "--data", tmp_path / "nope.jsonl"], capsys)
    assert str(tmp_path / "nope.jsonl") in message


# ---- (d), (e) missing or mismatched modules ------------------------------------------------------------------


def test_eval_directory_that_is_not_a_run(tiny_run, tmp_path, capsys):
    empty = tmp_path / "not_a_run"
    empty.mkdir()
    message = expect_error(["eval", "--run", empty, "--data", tiny_run / "data" / "test.jsonl"], capsys)
    assert str(empty) in message and "not a redkit run" in message


def test_eval_run_without_modules(run_copy, capsys):
    shutil.rmtree(run_copy / "modules")
    message = expect_error(["eval", "--run", run_copy, "--data", run_copy / "data" / "test.jsonl"], capsys)
    assert str(run_copy) in message
    assert "backbone_top" in message or "stage base" in message


def test_eval_run_without_router(run_copy, capsys):
    shutil.rmtree(run_copy / "modules" / "router")
    message = expect_error(["eval", "--run", run_copy, "--data", run_copy / "data" / "test.jsonl"], capsys)
    assert str(run_copy / "modules" / "router") in message and "no trained module" in message


def test_eval_expert_of_another_backbone(run_copy, capsys):
    config_path = run_copy / "modules" / "experts" / "residual" / "R1" / "config.json"
    config = json.loads(config_path.read_text())
    assert config["backbone_fingerprint"] != "0123456789abcdef"
    config["backbone_fingerprint"] = "0123456789abcdef"
    config_path.write_text(json.dumps(config))
    argv = ["eval", "--run", run_copy, "--data", run_copy / "data" / "test.jsonl", "--composition", "red"]
    message = expect_error(argv, capsys)
    assert str(config_path.parent) in message
    assert "trained on backbone 0123456789abcdef" in message and "retrain" in message


# ---- (f), (h), (i) unknown names -----------------------------------------------------------------------------


def test_eval_unknown_composition(tiny_run, capsys):
    before = sorted(p.name for p in (tiny_run / "cache").iterdir())
    argv = ["eval", "--run", tiny_run, "--data", tiny_run / "data" / "test.jsonl", "--composition", "rde"]
    message = expect_error(argv, capsys)
    assert "unknown composition 'rde'" in message and "did you mean 'red'?" in message
    assert sorted(p.name for p in (tiny_run / "cache").iterdir()) == before, "failed only after computing features"


def test_predict_unknown_composition(tiny_run, capsys):
    message = expect_error(["predict", "--run", tiny_run, "What is 12 plus 27?", "--composition", "moee"], capsys)
    assert "unknown composition 'moee'" in message and "did you mean 'moe'?" in message


@pytest.mark.parametrize(
    "stage, hint",
    [
        ("nonsense", "(known: base, experts, heads, router, gate, joint, linear_probe, host, owners)"),
        ("expert", "did you mean 'experts'?"),
    ],
)
def test_train_unknown_stage(tiny_run, capsys, stage, hint):
    message = expect_error(["train", stage, "--run", tiny_run], capsys)
    assert f"unknown stage {stage!r}" in message and hint in message


def test_train_unknown_expert_kind(tiny_run, capsys):
    message = expect_error(["train", "experts", "--run", tiny_run, "--kind", "residuals"], capsys)
    assert "'residuals'" in message and "residual" in message


@pytest.mark.parametrize("task, hint", [("nosuchtask", "(known: task1"), ("taks1", "did you mean 'task1'?")])
def test_data_unknown_task(tmp_path, capsys, task, hint):
    out = tmp_path / "X"
    message = expect_error(["data", task, "--out", out], capsys)
    assert f"unknown task {task!r}" in message and hint in message
    assert not out.exists()


def test_reproduce_unknown_benchmark(tmp_path, capsys):
    message = expect_error(["reproduce", "task9", "--out", tmp_path / "r"], capsys)
    assert "unknown benchmark 'task9'" in message and "task1" in message


# ---- (g) a backbone path that is not a model ---------------------------------------------------------------


def _backbone_dirs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp_path / "not_a_model_dir"
    empty.mkdir()
    no_type = tmp_path / "config_without_model_type"
    no_type.mkdir()
    (no_type / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2}))
    return {
        "empty": (empty, "no config.json"),
        "no_model_type": (no_type / "config.json", "model_type"),
        "missing": (tmp_path / "does_not_exist", "not a directory"),
    }


@pytest.mark.parametrize("case", ["empty", "no_model_type", "missing"])
def test_reproduce_with_a_backbone_that_is_not_a_model(tmp_path, capsys, case):
    named, what = _backbone_dirs(tmp_path)[case]
    backbone = named.parent if named.name == "config.json" else named
    out = tmp_path / "out"
    message = expect_error(["reproduce", "task1", "--backbone", backbone, *TINY_RUN_ARGS, "--out", out], capsys)
    assert str(named) in message and what in message


def test_a_bad_backbone_leaves_no_run_behind(tmp_path, capsys):
    named, _ = _backbone_dirs(tmp_path)["empty"]
    out = tmp_path / "out"
    expect_error(["reproduce", "task1", "--backbone", named, *TINY_RUN_ARGS, "--out", out], capsys)
    assert not (out / "config.json").exists()


# ---- a damaged run directory ---------------------------------------------------------------------------


def test_eval_run_with_corrupt_config(run_copy, capsys):
    (run_copy / "config.json").write_text("{not json")
    message = expect_error(["eval", "--run", run_copy, "--data", run_copy / "data" / "test.jsonl"], capsys)
    assert str(run_copy / "config.json") in message


# ---- happy paths ---------------------------------------------------------------------------------------------


def test_eval_prints_every_composition(tiny_run, capsys):
    data = tiny_run / "data" / "test.jsonl"
    n = sum(1 for line in data.read_text().splitlines() if line.strip())
    code, out, err = run_cli(["eval", "--run", tiny_run, "--data", data], capsys)
    assert code == 0, err
    assert "Traceback" not in out + err
    assert f"{data}: {n} examples" in out
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] in COMPOSITIONS:
            rows[parts[0]] = [float(x) for x in parts[1:]]
    assert list(rows) == COMPOSITIONS.names()
    for name, values in rows.items():
        assert all(0.0 <= v <= 1.0 for v in values), (name, values)
        acc = values[0]
        assert abs(acc * n - round(acc * n)) < 1e-2, f"{name}: accuracy {acc} is not k/{n}"


def test_eval_one_composition(tiny_run, capsys):
    data = tiny_run / "data" / "test.jsonl"
    code, out, _ = run_cli(["eval", "--run", tiny_run, "--data", data, "--composition", "red_oracle"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert names == ["red_oracle"]


@pytest.mark.parametrize("composition", [None, "base_classifier"])
def test_predict_prints_answer_and_expert_weights(tiny_run, capsys, composition):
    argv = ["predict", "--run", tiny_run, "What is 12 plus 27?"]
    argv += ["--composition", composition] if composition else []
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "Traceback" not in out + err
    title, head, row = out.splitlines()
    assert f"composition {composition or 'red'}" in title
    assert head.split() == ["text", "answer", "range", "p", *SHORT_NAMES]
    answer, range_, p, *weights = row.removeprefix("What is 12 plus 27?").split()
    assert 2 <= int(answer) <= 100 and range_ in SHORT_NAMES and 0 < float(p) <= 1
    values = [float(w) for w in weights]
    assert len(values) == len(SHORT_NAMES)
    assert all(0.0 <= w <= 1.0 for w in values) and abs(sum(values) - 1.0) < 5e-3
