"""`redkit add-expert` (a steps run: a new operation expert) and `redkit add-domain` (a fit run: a
new domain's expert): plug a module in later, nothing else retrained."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _expert_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="the trained steps run (only read)")
    p.add_argument("--operation", default="mul", help="the new expert's operation (default mul)")
    p.add_argument("--out", type=Path, default=None, help="the new run (default <run>-<operation>)")
    p.add_argument("--decomposer", type=Path, default=None,
                   help="a decomposer trained on decomposer_times data to reuse (default: trained in <out>/decomposer)")
    p.add_argument("--router", default=None, help="the new run's router kind (default the parent's); a training-free "
                                                  "one (prototype, arrow) plugs the expert in with no router training")


@command("add-expert", options=_expert_options,
         help="plug a new operation expert into a trained steps run (nothing else retrained)")
def add_expert(args) -> None:
    from redkit.steps.plugin import plug_in

    plug_in(args.run, args.out or args.run.with_name(f"{args.run.name}-{args.operation}"), args.operation, args.decomposer,
            router=args.router)


def _domain_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="the finished fit run (only read)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="the new domain(s)' train.jsonl|csv (+ optional val, test); new labels welcome")
    source.add_argument("--expert", type=Path, help="an expert directory made elsewhere by redkit train-expert")
    p.add_argument("--out", type=Path, default=None, help="the new run (default <run>+<domain>)")


@command("add-domain", options=_domain_options,
         help="plug a new domain's expert into a fit run (written to a new run; nothing else retrained, checked)")
def add_domain(args) -> None:
    from redkit.lifecycle.add import add_domain

    add_domain(args.run, args.data, args.out, expert_dir=args.expert)
