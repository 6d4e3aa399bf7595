"""`redkit remove-domain` and `redkit train-expert`: the life cycle of a fit run's domains
(redkit/lifecycle); `redkit add-domain` is in add.py."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _remove_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="the finished fit run (only read)")
    p.add_argument("--domain", required=True, help="the domain to take out")
    p.add_argument("--out", type=Path, default=None, help="the new run (default <run>-<domain>)")


@command(
    "remove-domain",
    options=_remove_options,
    help="take a domain's experts, head, labels and data out of a fit run (router retrained; nothing else, checked)",
)
def remove_domain(args) -> None:
    from redkit.lifecycle.remove import remove_domain

    remove_domain(args.run, args.domain, args.out)


def _expert_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", required=True, type=Path, help="a bundle of the fit run (redkit export), only read")
    p.add_argument("--data", required=True, type=Path, help="the new domain(s)' train.jsonl|csv (+ optional val, test)")
    p.add_argument("--out", required=True, type=Path, help="the expert directory to write")
    p.add_argument(
        "--modules-only",
        action="store_true",
        help="keep no data in the expert directory, only its modules (the run's router must be gaussian)",
    )


@command(
    "train-expert",
    options=_expert_options,
    help="train a new domain's expert from a bundle and its data alone (anywhere); add-domain --expert plugs it in",
)
def train_expert(args) -> None:
    from redkit.lifecycle.expert import train_expert

    train_expert(args.bundle, args.data, args.out, modules_only=args.modules_only)
