"""A command that writes a new directory names it `--out`; one that reads a trained run names it `--run`.

The tests go over the registries, not a list typed here: a benchmark, study or analysis added later is
checked the day it is registered."""

import argparse
from pathlib import Path

import pytest

from redkit.cli.command import COMMANDS
from redkit.cli.reproduce import BENCHMARKS
from redkit.plugins import load_commands
from redkit_experiments.routing.cli import ANALYSES
from redkit_experiments.study.cli import STUDIES

load_commands()  # every command and sub-command registered, as the command line registers them

# What other tools call an output directory: in redkit each is --out (an old spelling may stay as its alias).
OTHER_SPELLINGS = {"--save_dir", "--save-dir", "--output", "--output-dir", "--output_dir", "--out-dir", "--outdir"}


def _parser(options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    options(parser)
    return parser


def _every_parser():
    for name in COMMANDS:
        command = COMMANDS[name]
        if not command.group:
            yield name, _parser(command.options)
    for group, registry in (("reproduce", BENCHMARKS), ("study", STUDIES), ("analyze", ANALYSES)):
        for name in registry:
            yield f"{group} {name}", _parser(registry[name][0])


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_every_benchmark_writes_where_out_says(name, tmp_path):
    args = _parser(BENCHMARKS[name][0]).parse_args(["--out", str(tmp_path / "here")])
    assert args.out == tmp_path / "here"


@pytest.mark.parametrize("name", [f"study {n}" for n in STUDIES] + [f"analyze {n}" for n in ANALYSES])
def test_a_study_reads_a_run_or_writes_where_out_says(name):
    group, sub = name.split()
    registry = STUDIES if group == "study" else ANALYSES
    options = {o for action in _parser(registry[sub][0])._actions for o in action.option_strings}
    assert "--run" in options or "--out" in options, f"redkit {name}: neither --run nor --out"


def test_no_command_spells_its_output_directory_otherwise():
    for name, parser in _every_parser():
        for action in parser._actions:
            other = OTHER_SPELLINGS & set(action.option_strings)
            assert not other or action.dest == "out", f"redkit {name}: {sorted(other)} is not an alias of --out"


def test_digits_takes_out_and_still_reads_the_original_codes_save_dir():
    parser = _parser(BENCHMARKS["digits"][0])
    for flag in ("--out", "--save_dir", "--save-dir"):
        args = parser.parse_args([flag, "runs/d", "--run", "red"])
        assert args.out == Path("runs/d") and args.run == "red"  # --run: the original code's choice of stages
