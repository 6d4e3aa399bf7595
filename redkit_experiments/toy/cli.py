"""`redkit reproduce toy`: the toy experiments A/B/C (linear, MLP and residual experts)."""

import argparse
from pathlib import Path

from redkit.cli.command import sub_command
from redkit.cli.reproduce import BENCHMARKS


def _toy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=Path, default=Path("runs/toy"), help="where toy_results.json, toy_report.md and the figure go"
    )
    p.add_argument("--seed", type=int, default=0)


@sub_command(BENCHMARKS, "toy", _toy_options)
def reproduce_toy(args) -> None:
    from redkit_experiments.toy import ToyConfig, format_tables, reproduce_toy

    print(format_tables(reproduce_toy(args.out, ToyConfig(seed=args.seed))))
