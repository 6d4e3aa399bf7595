"""`redkit train STAGE --run RUN [--domain NAME] [--kind residual]`: one stage of a run, e.g. one expert."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.cli.options import nproc_option
from redkit.errors import RedkitError


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "stage",
        help="base | experts | heads | router | gate; a run of the replay-free recipe: host | owners | router | gate",
    )
    p.add_argument("--run", required=True, type=Path)
    p.add_argument(
        "--domain",
        action="append",
        default=None,
        help="a domain (R1..R5 in Task 1, a fit run's own names) for experts/heads; repeatable",
    )
    p.add_argument("--kind", action="append", default=None, help="expert kind for stage experts: residual, logit")
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="stage experts: train in fp32 or under bf16 autocast (recorded in each module's metrics)",
    )
    p.add_argument(
        "--retrain",
        action="store_true",
        help="train again the modules of this stage that already exist (experts, heads, router, gate): each new "
        "one replaces the old once it is saved; nothing else is retrained (the router only when asked)",
    )
    nproc_option(p)


RETRAINABLE = ("experts", "heads", "router", "gate")  # modules on cached features, each trained alone


def _domains(run, names: list[str] | None) -> list[int] | None:
    """Domain indices by name (a Task 1/2 run also takes range_41_60, R3 or 2): the run's kind knows."""
    return None if names is None else [run.domain_index(name) for name in names]


@command("train", options=_options, help="run one stage of an existing run (e.g. one expert, in its own process)")
def run(args) -> None:
    from redkit.fitting.replay_free import check_stage
    from redkit.run import open_run
    from redkit.train.stages import EXPERT_KINDS, STAGES, stage_line

    run = open_run(args.run)
    stage = STAGES[args.stage]
    check_stage(run.config, args.stage, run.dir)
    if args.stage == "base":
        from redkit.train.distributed import check_run_nproc

        check_run_nproc(run.dir, run.config, args.nproc)  # before anything is written
    elif args.nproc != 1:
        raise RedkitError(f"--nproc {args.nproc}: only stage base runs in several processes, not stage {args.stage}")
    if args.retrain and args.stage not in RETRAINABLE:
        raise RedkitError(
            f"--retrain: stage {args.stage} cannot be retrained in place (every module after it was trained on what it "
            f"gives); make a new run instead. Retrainable: {', '.join(RETRAINABLE)}"
        )
    run.prepare_data()
    if args.stage == "experts":
        kinds = tuple(args.kind or EXPERT_KINDS)
        for kind in kinds:
            if kind not in EXPERT_KINDS:
                raise RedkitError(f"unknown expert kind {kind!r} (expected one of {', '.join(EXPERT_KINDS)})")
        outcome = stage(
            run, domains=_domains(run, args.domain), kinds=kinds, precision=args.precision, retrain=args.retrain
        )
    elif args.stage == "heads":
        outcome = stage(run, domains=_domains(run, args.domain), retrain=args.retrain)
    elif args.stage == "owners":
        outcome = stage(run, domains=args.domain)
    elif args.stage == "base" and args.nproc != 1:
        from redkit.train.distributed import launch_base

        outcome = launch_base(run, args.nproc)
    elif args.stage in RETRAINABLE:
        outcome = stage(run, retrain=args.retrain)
    else:
        outcome = stage(run)
    line = stage_line(args.stage, outcome)
    if args.stage in RETRAINABLE and _all_kept(outcome):
        line += "; --retrain trains again"
    print(line)


def _all_kept(outcome: dict) -> bool:
    """Whether the stage trained nothing because every module it would train exists."""
    outcomes = outcome.values() if all(isinstance(v, dict) for v in outcome.values()) else [outcome]
    return bool(outcome) and all("skipped" in one for one in outcomes)
