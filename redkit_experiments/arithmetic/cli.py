"""The arithmetic tasks on the command line: `redkit data TASK --out DIR` writes a task's
train/val/test JSONL files; `redkit reproduce task1|task2` runs one end to end (data, every stage,
evaluation, results.json, report.md). `add_run_options` / `run_config` are the flags and config of
every run made from a generated task (the steps and peers benchmarks' too)."""

import argparse
from pathlib import Path

from redkit.cli.command import command, sub_command
from redkit.cli.options import backbone_config, eval_option, model_options, nproc_option, router_option, staged_settings
from redkit.cli.reproduce import BENCHMARKS


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("task")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=("structure", "random"), default="structure")


@command("data", options=_options, help="write a task's train/val/test JSONL files")
def run(args) -> None:
    from redkit_experiments.arithmetic.generate import DataConfig, generate, write_dataset
    from redkit_experiments.arithmetic.tasks import TASKS

    n = args.n if args.n is not None else TASKS[args.task].default_n
    config = DataConfig(task=args.task, n=n, seed=args.seed, split=args.split)
    summary = write_dataset(args.out, generate(config), config)
    for split, info in summary["splits"].items():
        print(
            f"{split:24s} {info['count']:6d} examples, {info['distinct_structures']:6d} structures, per range {list(info['per_domain'].values())}"
        )
    print(f"wrote {args.out}")


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", choices=("structure", "random"), default="structure")
    p.add_argument("--n", type=int, default=None, help="examples in train+val+test (default: the task's, 80000)")
    model_options(p)


def run_config(args: argparse.Namespace, task: str, data_task: str | None = None, config_class=None):
    """A text run's config from the flags; `data_task` names the generator when it differs from the
    benchmark (steps: per-operation data)."""
    from redkit_experiments.arithmetic.generate import DataConfig
    from redkit_experiments.arithmetic.run import RunConfig
    from redkit_experiments.arithmetic.tasks import TASKS

    data_task = data_task or task
    n = args.n if args.n is not None else TASKS[data_task].default_n
    config = (config_class or RunConfig)(
        task=task,
        seed=args.seed,
        data=DataConfig(task=data_task, n=n, seed=args.seed, split=args.split),
        backbone=backbone_config(args),
        expert_rank=args.rank,
        device=args.device,
        router=args.router,
        router_loss=args.router_loss,
    )
    return staged_settings(config, args)


def _text_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/<task>[-random])")
    p.add_argument(
        "--experts",
        type=int,
        default=None,
        help="K experts, each a contiguous equal-width part of the answers (default: one per range R1..R5)",
    )
    eval_option(p)
    add_run_options(p)
    router_option(p)
    nproc_option(p)
    p.add_argument(
        "--references",
        nargs="*",
        default=[],
        choices=("joint", "linear_probe"),
        help="also train and score these non-modular references (joint fine-tunes the top layers on all "
        "of train: on Task 1 about as long as stage base on 100%% of it)",
    )


def text_config(args, task: str):
    """The RunConfig `reproduce task1|task2` would run with these flags (nothing written)."""
    from redkit.backbone.locate import check_model_dir

    config = run_config(args, task)
    config.references = tuple(args.references)
    if args.experts is not None:
        from redkit_experiments.arithmetic.space import ANSWER_RANGES

        ANSWER_RANGES.in_equal_parts(args.experts)  # a bad K fails before anything is written
        config.experts = args.experts
    if config.backbone.path:  # refuse a bad path before anything is written
        check_model_dir(Path(config.backbone.path))
    return config


def _text_benchmark(task: str):
    """Task 1 and Task 2 share one pipeline: data -> base -> experts -> heads -> router -> gate."""

    @sub_command(BENCHMARKS, task, _text_options)
    def run(args) -> None:
        out = args.out or Path("runs") / (task + ("" if args.split == "structure" else f"-{args.split}"))
        from redkit_experiments.arithmetic.run import reproduce

        reproduce(out, text_config(args, task), tuple(args.eval_files), nproc=args.nproc)


_text_benchmark("task1")
_text_benchmark("task2")
