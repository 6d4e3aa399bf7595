"""`redkit export --run RUN --out BUNDLE [--heads]`: a trained run's inference modules as a bundle
(redkit/bundle), which eval, predict and redkit.load accept wherever they accept a run."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (only read)")
    p.add_argument("--out", required=True, type=Path, help="the bundle directory to write (must not exist)")
    p.add_argument(
        "--heads",
        action="store_true",
        help="also the full per-domain and global heads, which moe, oracle, uniform and global_head need",
    )


@command(
    "export", options=_options, help="write the part of a trained run that inference needs, with a verified manifest"
)
def run(args) -> None:
    from redkit.bundle.export import describe, export_bundle

    print(describe(args.out, export_bundle(args.run, args.out, heads=args.heads)))
