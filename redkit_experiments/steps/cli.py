"""`redkit reproduce steps` (operation experts + routed step execution) and `reproduce decomposer`."""

import argparse
from pathlib import Path

from redkit.cli.command import command, sub_command
from redkit.cli.options import eval_option, nproc_option, router_option
from redkit.cli.reproduce import BENCHMARKS
from redkit_experiments.arithmetic.cli import add_run_options, run_config


def _steps_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/steps"))
    p.add_argument(
        "--programs",
        type=int,
        default=80_000,
        help="size of the decomposer dataset and of Task 2's, whose test programs and questions are executed",
    )
    p.add_argument(
        "--op-split",
        choices=("random", "structure"),
        default="random",
        help="split of the operation data (--split is the programs')",
    )
    p.add_argument(
        "--decomposer",
        type=Path,
        default=None,
        help="train (or reuse, when trained on the same data) the decomposer here (default <out>/decomposer)",
    )
    eval_option(p)  # its questions are answered by decomposition
    add_run_options(p)
    router_option(p)
    nproc_option(p)


def steps_config(args):
    """The StepsConfig `reproduce steps` would run with these flags (nothing written)."""
    from redkit_experiments.steps import StepsConfig

    config = run_config(args, "steps", data_task="op_add", config_class=StepsConfig)
    config.data.split = args.op_split
    config.decomposer = _decomposer_config(args, n=args.programs)
    config.decomposer_dir = str(args.decomposer.resolve()) if args.decomposer else None
    return config


@sub_command(BENCHMARKS, "steps", _steps_options)
def reproduce_steps(args) -> None:
    from redkit_experiments.steps.benchmark import reproduce_steps

    reproduce_steps(args.out, steps_config(args), tuple(args.eval_files), nproc=args.nproc)


def _decomposer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/decomposer"))
    p.add_argument(
        "--task",
        choices=("decomposer", "decomposer_times"),
        default="decomposer",
        help="decomposer_times: programs with * steps too",
    )
    p.add_argument("--tune-top", action="store_true", help="fine-tune the backbone's top layers with the head")
    add_run_options(p)


def _decomposer_config(args, n: int | None = None, task: str = "decomposer", tune_top: bool = False):
    from redkit.backbone import BackboneConfig
    from redkit_experiments.decomposer import DecomposerConfig

    config = DecomposerConfig(
        task=task,
        n=n or 80_000,
        seed=args.seed,
        split=args.split,
        tune_top=tune_top,
        device=args.device,
        backbone=BackboneConfig(
            path=str(Path(args.backbone).resolve()) if args.backbone else None,
            trainable_layers=args.trainable_layers,
            precision=args.precision,
        ),
    )
    if args.max_epochs is not None:
        config.train.max_epochs = args.max_epochs
    return config


@sub_command(BENCHMARKS, "decomposer", _decomposer_options)
def reproduce_decomposer(args) -> None:
    from redkit_experiments.decomposer import reproduce_decomposer

    reproduce_decomposer(args.out, _decomposer_config(args, n=args.n, task=args.task, tune_top=args.tune_top))


def _expert_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="the trained steps run (only read)")
    p.add_argument("--operation", default="mul", help="the new expert's operation (default mul)")
    p.add_argument("--out", type=Path, default=None, help="the new run (default <run>-<operation>)")
    p.add_argument(
        "--decomposer",
        type=Path,
        default=None,
        help="a decomposer trained on decomposer_times data to reuse (default: trained in <out>/decomposer)",
    )
    p.add_argument(
        "--router",
        default=None,
        help="the new run's router kind (default the parent's); a training-free "
        "one (prototype, arrow) plugs the expert in with no router training",
    )


@command(
    "add-expert",
    options=_expert_options,
    help="plug a new operation expert into a trained steps run (nothing else retrained)",
)
def add_expert(args) -> None:
    from redkit_experiments.steps.plugin import plug_in

    plug_in(
        args.run,
        args.out or args.run.with_name(f"{args.run.name}-{args.operation}"),
        args.operation,
        args.decomposer,
        router=args.router,
    )
