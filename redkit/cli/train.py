"""`redkit train STAGE --run RUN [--domain NAME] [--kind residual]`: one stage of a run, e.g. one expert."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.errors import RedkitError


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("stage", help="base | experts | heads | router | gate")
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--domain", action="append", default=None, help="range (R1..R5) for experts/heads; repeatable")
    p.add_argument("--kind", action="append", default=None, help="expert kind for stage experts: residual, logit")


def _domains(names: list[str] | None) -> list[int] | None:
    from redkit.data.vocabulary import parse_domain

    return None if names is None else [parse_domain(name) for name in names]


@command("train", options=_options,
         help="run one stage of an existing run (e.g. one expert, in its own process)")
def run(args) -> None:
    from redkit.run import Run
    from redkit.train.stages import EXPERT_KINDS, STAGES

    run = Run(args.run)
    run.prepare_data()
    stage = STAGES[args.stage]
    if args.stage == "experts":
        kinds = tuple(args.kind or EXPERT_KINDS)
        for kind in kinds:
            if kind not in EXPERT_KINDS:
                raise RedkitError(f"unknown expert kind {kind!r} (expected one of {', '.join(EXPERT_KINDS)})")
        print(stage(run, domains=_domains(args.domain), kinds=kinds))
    elif args.stage == "heads":
        print(stage(run, domains=_domains(args.domain)))
    else:
        print(stage(run))
