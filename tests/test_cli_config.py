"""`--config FILE.yaml`: defaults from a file, flags override it, unknown keys named; the shipped
benchmark configs resolve to exactly today's defaults."""

import argparse
from pathlib import Path

import pytest
from conftest import run_cli

from redkit.cli.options import parse_args
from redkit.errors import RedkitError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _parse(add_options, argv):
    parser = argparse.ArgumentParser()
    add_options(parser)
    return parse_args(parser, [str(a) for a in argv])


@pytest.mark.parametrize("task", ["task1", "task2"])
def test_shipped_text_config_is_todays_defaults(task):
    from redkit_experiments.arithmetic.cli import _text_options, text_config

    with_file = text_config(_parse(_text_options, ["--config", CONFIGS / f"{task}.yaml"]), task)
    assert with_file == text_config(_parse(_text_options, []), task)
    assert _parse(_text_options, ["--config", CONFIGS / f"{task}.yaml"]).out == Path("runs") / task


def test_shipped_steps_and_digits_configs_are_todays_defaults():
    from redkit_experiments.digits.cli import _digits_options, digits_config
    from redkit_experiments.steps.cli import _steps_options, steps_config

    assert steps_config(_parse(_steps_options, ["--config", CONFIGS / "steps.yaml"])) == steps_config(
        _parse(_steps_options, [])
    )
    assert vars(_parse(_digits_options, ["--config", CONFIGS / "digits.yaml"])) | {"config": None} == vars(
        _parse(_digits_options, [])
    ) | {"config": None}
    assert digits_config(_parse(_digits_options, ["--config", CONFIGS / "digits.yaml"])) == digits_config(
        _parse(_digits_options, [])
    )


def test_shipped_clinc150_config_is_todays_defaults():
    from redkit.cli.reproduce_clinc150 import _options

    with_file = vars(_parse(_options, ["--config", CONFIGS / "clinc150.yaml"])) | {"config": None}
    assert with_file | {"data": None} == vars(_parse(_options, [])) | {"config": None, "data": None}
    assert with_file["data"].name == "clinc150"


def test_flags_override_the_file_and_repeatable_flags_replace_its_list(tmp_path):
    from redkit_experiments.arithmetic.cli import _text_options, text_config

    file = tmp_path / "c.yaml"
    file.write_text("seed: 3\nmax_epochs: 2\ntrainable-layers: 1\neval: [a.jsonl, b.jsonl]\n")
    args = _parse(_text_options, ["--config", file, "--seed", "5"])
    assert (args.seed, args.max_epochs, args.trainable_layers, args.eval_files) == (
        5,
        2,
        1,
        [Path("a.jsonl"), Path("b.jsonl")],
    )
    assert text_config(args, "task1").stage_overrides["router"]["max_epochs"] == 2
    assert _parse(_text_options, ["--config", file, "--eval", "c.jsonl"]).eval_files == [Path("c.jsonl")]


@pytest.mark.parametrize(
    "text, message",
    [
        ("lerning-rate: 3\n", "unknown key 'lerning-rate'"),
        ("max-epoch: 3\n", "unknown key 'max-epoch'; did you mean 'max-epochs'?"),
        ("seed: three\n", "key 'seed': 'three' is not a valid int"),
        ("pooling: sum\n", "key 'pooling': 'sum' is not one of mean, last, cls"),
        ("- seed\n", "a config is a mapping"),
        ("seed: [1\n", "not a YAML file"),
    ],
)
def test_bad_config_is_one_line_naming_the_file(tmp_path, capsys, text, message):
    file = tmp_path / "c.yaml"
    file.write_text(text)
    out = tmp_path / "run"
    code, _, err = run_cli(["reproduce", "task1", "--config", file, "--out", out], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(file) in err and message in err
    assert not out.exists()


def test_every_command_takes_a_config(tmp_path, capsys):
    """A top-level command (train) reads its required --run from the file, and names unknown keys."""
    file = tmp_path / "c.yaml"
    file.write_text(f"run: {tmp_path / 'nowhere'}\n")
    code, _, err = run_cli(["train", "experts", "--config", file], capsys)
    assert code == 2 and "nowhere: not a redkit run" in err
    file.write_text("runn: x\n")
    code, _, err = run_cli(["eval", "--config", file, "--data", "x.jsonl"], capsys)
    assert code == 2 and "did you mean 'run'?" in err
    with pytest.raises(RedkitError, match="config file not found"):
        _parse(lambda p: None, ["--config", tmp_path / "missing.yaml"])


@pytest.mark.parametrize("argv, key", [(["export", "--run", "r"], "out"), (["eval", "--data", "x.jsonl"], "run")])
def test_a_required_option_set_to_null_in_the_file_is_one_line(tmp_path, capsys, argv, key):
    """Found by scripts/fuzz_cli.py: `out: null` satisfied --out's requirement and reached export as None."""
    file = tmp_path / "c.yaml"
    file.write_text(f"{key}: null\n")
    code, _, err = run_cli([*argv, "--config", file], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"key '{key}' is a required option and needs a value" in err
