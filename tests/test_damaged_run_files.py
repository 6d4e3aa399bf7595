"""A run whose module files or config were damaged (what scripts/fuzz_cli.py does by the thousand):
each is refused with one line naming the file, exit code 2, never a traceback."""

import json
import shutil

import pytest
import torch
from conftest import run_cli
from safetensors.torch import load_file, save_file

QUESTION = "What is 12 plus 27?"


@pytest.fixture
def run_copy(tiny_run, tmp_path):
    return shutil.copytree(tiny_run, tmp_path / "run", ignore=shutil.ignore_patterns("cache"))


def _refused(run, capsys) -> str:
    code, _, err = run_cli(["predict", "--run", run, QUESTION], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("module", ["router", "classifier", "backbone_top"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_naming_the_file(run_copy, capsys, module, value):
    path = run_copy / "modules" / module / "model.safetensors"
    state = load_file(str(path))
    name = sorted(state)[0]
    state[name] = state[name].clone().view(-1).index_fill(0, torch.tensor([0]), value).view_as(state[name])
    save_file(state, str(path))
    err = _refused(run_copy, capsys)
    assert str(path) in err and f"tensor {name!r} holds NaN or infinite values" in err


@pytest.mark.parametrize("keep", [0, 7, 100, -1])
def test_a_truncated_safetensors_file_is_refused_naming_the_file(run_copy, capsys, keep):
    path = run_copy / "modules" / "router" / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[: len(data) // 2])
    err = _refused(run_copy, capsys)
    assert str(path) in err and "not a readable safetensors file" in err


@pytest.mark.parametrize(
    "field, value", [("config", []), ("kind", 3), ("config", {"dim": 384, "bogus": 1}), ("metrics", "x")]
)
def test_an_ill_typed_module_config_is_refused_naming_the_file(run_copy, capsys, field, value):
    path = run_copy / "modules" / "router" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {field: value}))
    err = _refused(run_copy, capsys)
    assert str(path) in err and "config" in err


@pytest.mark.parametrize("value", ["-1" + "0" * 40, "1e400", "NaN"])
def test_a_module_config_number_no_float_holds_is_refused_naming_the_field(run_copy, capsys, value):
    """Found by scripts/fuzz_cli.py: the gate's temperature set to -10**40 reached `logits / T` as an int and
    raised OverflowError from torch (1e400 reads as infinity, NaN as NaN: every weight NaN or zero)."""
    path = run_copy / "modules" / "gate" / "config.json"
    text = path.read_text()
    assert '"temperature": 1.0' in text  # what the value replaces (json.dumps' own spacing)
    path.write_text(text.replace('"temperature": 1.0', f'"temperature": {value}'))
    code, _, err = run_cli(["predict", "--run", run_copy, QUESTION, "--composition", "moe"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(path) in err and "field 'temperature'" in err and "is not a float" in err


@pytest.mark.parametrize(
    "content",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"seed": 1' + "0" * 5000 + "}",
        "\xff\xfe",
        "[]",
        '{"device": "nowhere"}',
        '{"device": "cuda:7"}',
        '{"device": 3}',
    ],
)
def test_a_damaged_run_config_is_refused_naming_the_file(run_copy, capsys, content):
    path = run_copy / "config.json"
    path.write_bytes(content.encode("latin-1"))
    err = _refused(run_copy, capsys)
    assert str(path) in err and len(err) < 400
