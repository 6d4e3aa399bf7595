"""`redkit reproduce steps` (operation experts + routed step execution) and `reproduce decomposer`."""

import argparse
from pathlib import Path

from redkit.cli.command import sub_command
from redkit.cli.options import add_run_options, eval_option, router_option, run_config
from redkit.cli.reproduce import BENCHMARKS


def _steps_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/steps"))
    p.add_argument("--programs", type=int, default=80_000,
                   help="size of the decomposer dataset and of Task 2's, whose test programs and questions are executed")
    p.add_argument("--op-split", choices=("random", "structure"), default="random",
                   help="split of the operation data (--split is the programs')")
    p.add_argument("--decomposer", type=Path, default=None,
                   help="train (or reuse, when trained on the same data) the decomposer here (default <out>/decomposer)")
    eval_option(p)  # its questions are answered by decomposition
    add_run_options(p)
    router_option(p)


def steps_config(args):
    """The StepsConfig `reproduce steps` would run with these flags (nothing written)."""
    from redkit.steps import StepsConfig

    config = run_config(args, "steps", data_task="op_add", config_class=StepsConfig)
    config.data.split = args.op_split
    config.decomposer = _decomposer_config(args, n=args.programs)
    config.decomposer_dir = str(args.decomposer.resolve()) if args.decomposer else None
    return config


@sub_command(BENCHMARKS, "steps", _steps_options)
def reproduce_steps(args) -> None:
    from redkit.steps.benchmark import reproduce_steps

    reproduce_steps(args.out, steps_config(args), tuple(args.eval_files))


def _decomposer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/decomposer"))
    p.add_argument("--task", choices=("decomposer", "decomposer_times"), default="decomposer",
                   help="decomposer_times: programs with * steps too")
    p.add_argument("--tune-top", action="store_true", help="fine-tune the backbone's top layers with the head")
    add_run_options(p)


def _decomposer_config(args, n: int | None = None, task: str = "decomposer", tune_top: bool = False):
    from redkit.backbone import BackboneConfig
    from redkit.decomposer import DecomposerConfig

    config = DecomposerConfig(task=task, n=n or 80_000, seed=args.seed, split=args.split, tune_top=tune_top, device=args.device,
                              backbone=BackboneConfig(path=str(Path(args.backbone).resolve()) if args.backbone else None,
                                                      trainable_layers=args.trainable_layers, precision=args.precision))
    if args.max_epochs is not None:
        config.train.max_epochs = args.max_epochs
    return config


@sub_command(BENCHMARKS, "decomposer", _decomposer_options)
def reproduce_decomposer(args) -> None:
    from redkit.decomposer import reproduce_decomposer

    reproduce_decomposer(args.out, _decomposer_config(args, n=args.n, task=args.task, tune_top=args.tune_top))
