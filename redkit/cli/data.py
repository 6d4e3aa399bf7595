"""`redkit data TASK --out DIR`: write a task's train/val/test JSONL files."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("task")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=("structure", "random"), default="structure")


@command("data", options=_options, help="write a task's train/val/test JSONL files")
def run(args) -> None:
    from redkit.data.generate import DataConfig, generate, write_dataset
    from redkit.data.tasks import TASKS

    n = args.n if args.n is not None else TASKS[args.task].default_n
    config = DataConfig(task=args.task, n=n, seed=args.seed, split=args.split)
    summary = write_dataset(args.out, generate(config), config)
    for split, info in summary["splits"].items():
        print(f"{split:24s} {info['count']:6d} examples, {info['distinct_structures']:6d} structures, per range {list(info['per_domain'].values())}")
    print(f"wrote {args.out}")
