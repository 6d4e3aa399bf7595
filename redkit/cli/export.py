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
    p.add_argument(
        "--no-serving-graph", action="store_true", help="leave out the ONNX graph `redkit serve` answers with"
    )
    p.add_argument(
        "--serving-without-oos",
        action="store_true",
        help="a serving graph without the run's OOS score (out_of_scope null): one encoder instead of two where the "
        "score compares with the training texts, about twice as fast",
    )


@command(
    "export", options=_options, help="write the part of a trained run that inference needs, with a verified manifest"
)
def run(args) -> None:
    from redkit.bundle.export import describe, export_bundle

    manifest = export_bundle(
        args.run,
        args.out,
        heads=args.heads,
        serving=not args.no_serving_graph,
        serving_oos=not args.serving_without_oos,
    )
    print(describe(args.out, manifest))
