"""`redkit reproduce BENCHMARK [its flags]`: Task 1 and Task 2 and the toy experiments here; the
other benchmarks register themselves from their own modules (steps, digits, peers)."""

import argparse
from pathlib import Path

from redkit.cli.command import group, sub_command
from redkit.cli.options import add_run_options, eval_option, nproc_option, router_option, run_config

BENCHMARKS = group("reproduce", "benchmark", help="run a benchmark end to end and print its tables",
                   description="Run a benchmark end to end. `redkit reproduce BENCHMARK --help` lists its flags.",
                   plugins=("redkit.cli.reproduce_steps", "redkit.cli.reproduce_digits", "redkit.cli.reproduce_peers",
                            "redkit.cli.reproduce_clinc150", "redkit.cli.reproduce_spectra"))


def _text_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/<task>[-random])")
    p.add_argument("--experts", type=int, default=None,
                   help="K experts, each a contiguous equal-width part of the answers (default: one per range R1..R5)")
    eval_option(p)
    add_run_options(p)
    router_option(p)
    nproc_option(p)
    p.add_argument("--references", nargs="*", default=[], choices=("joint", "linear_probe"),
                   help="also train and score these non-modular references (joint fine-tunes the top layers on all "
                        "of train: on Task 1 about as long as stage base on 100%% of it)")


def text_config(args, task: str):
    """The RunConfig `reproduce task1|task2` would run with these flags (nothing written)."""
    from redkit.backbone.locate import check_model_dir

    config = run_config(args, task)
    config.references = tuple(args.references)
    if args.experts is not None:
        from redkit.space import ANSWER_RANGES

        ANSWER_RANGES.in_equal_parts(args.experts)  # a bad K fails before anything is written
        config.experts = args.experts
    if config.backbone.path:  # refuse a bad path before anything is written
        check_model_dir(Path(config.backbone.path))
    return config


def _text_benchmark(task: str):
    """Task 1 and Task 2 share one pipeline: data -> base -> experts -> heads -> router -> gate."""
    @sub_command(BENCHMARKS, task, _text_options)
    def run(args) -> None:
        from redkit.pipeline import reproduce

        out = args.out or Path("runs") / (task + ("" if args.split == "structure" else f"-{args.split}"))
        reproduce(out, text_config(args, task), tuple(args.eval_files), nproc=args.nproc)


_text_benchmark("task1")
_text_benchmark("task2")


def _toy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/toy"), help="where toy_results.json, toy_report.md and the figure go")
    p.add_argument("--seed", type=int, default=0)


@sub_command(BENCHMARKS, "toy", _toy_options)
def reproduce_toy(args) -> None:
    from redkit.toy import ToyConfig, format_tables, reproduce_toy

    print(format_tables(reproduce_toy(args.out, ToyConfig(seed=args.seed))))
