"""`redkit analyze ANALYSIS --run RUN [its flags]`: analyse a trained run (results under <run>/analysis/)."""

import argparse
from pathlib import Path

from redkit.cli.command import group, sub_command

ANALYSES = group(
    "analyze",
    "analysis",
    help="analyse a trained run (results under <run>/analysis/)",
    description="`redkit analyze ANALYSIS --help` lists an analysis's flags.",
)


def _routing_options(p: argparse.ArgumentParser) -> None:
    from redkit_experiments.routing.analyze import PARTS, RoutingAnalysisConfig

    p.add_argument(
        "--run", required=True, type=Path, help="a trained run with a router (task1, task2, steps or digits)"
    )
    p.add_argument("--router", action="append", default=None, help="a router of the zoo (repeatable; default: all)")
    p.add_argument("--part", action="append", default=None, help=f"{' | '.join(PARTS)} (default: all)")
    p.add_argument(
        "--seeds",
        type=int,
        default=RoutingAnalysisConfig.seeds,
        help="seeds of the router stage for stability (default 3)",
    )
    p.add_argument(
        "--experts", type=int, action="append", default=None, help="values of K for the scaling (default 4 8 16 32)"
    )
    p.add_argument("--split", default="test")
    p.add_argument(
        "--max-epochs",
        type=int,
        default=RoutingAnalysisConfig.max_epochs,
        help="cap the epochs of every stage the analysis trains (default 5; 0: the stages' own caps)",
    )
    p.add_argument(
        "--train-examples",
        type=int,
        default=RoutingAnalysisConfig.train_examples,
        help="train every router, gate and scaling expert on this fixed random subset of train (default 8000; 0: all)",
    )
    p.add_argument(
        "--monitor-every",
        type=int,
        default=RoutingAnalysisConfig.monitor_every,
        help="optimizer steps between logged routing metrics while a router trains (default 50)",
    )
    p.add_argument(
        "--repeats", type=int, default=RoutingAnalysisConfig.repeats, help="timed calls per overhead component"
    )


@sub_command(ANALYSES, "routing", _routing_options)
def routing(args) -> None:
    from redkit_experiments.routing.analyze import PARTS, RoutingAnalysisConfig, run_routing_analysis

    config = RoutingAnalysisConfig(
        routers=tuple(args.router or ()),
        parts=tuple(args.part or PARTS),
        seeds=args.seeds,
        experts=tuple(args.experts or RoutingAnalysisConfig.experts),
        split=args.split,
        max_epochs=args.max_epochs,
        train_examples=args.train_examples,
        monitor_every=args.monitor_every,
        repeats=args.repeats,
    )
    run_routing_analysis(args.run, config)
