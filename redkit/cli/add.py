"""`redkit add-domain` (a fit run: a new domain's expert): plug a module in later, nothing else retrained."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _domain_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="the finished fit run (only read)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data", type=Path, help="the new domain(s)' train.jsonl|csv (+ optional val, test); new labels welcome"
    )
    source.add_argument("--expert", type=Path, help="an expert directory made elsewhere by redkit train-expert")
    p.add_argument("--out", type=Path, default=None, help="the new run (default <run>+<domain>)")
    p.add_argument(
        "--router",
        default=None,
        help="the new run's router and gate (default: the run's); gaussian: replay-free, built from each domain's "
        "class statistics (computed once per old domain from its own data), so later adds read no other domain's data",
    )


@command(
    "add-domain",
    options=_domain_options,
    help="plug a new domain's expert into a fit run (written to a new run; nothing else retrained, checked)",
)
def add_domain(args) -> None:
    from redkit.lifecycle.add import add_domain

    add_domain(args.run, args.data, args.out, expert_dir=args.expert, router=args.router)
