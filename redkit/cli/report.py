"""`redkit report --run RUN`: rebuild <run>/report.html from the run and its studies."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.errors import RedkitError


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path)


@command(
    "report", options=_options, help="rebuild <run>/report.html: the run's tables and every study, figures inlined"
)
def run(args) -> None:
    from redkit.report_html import write_html_report

    if (
        not (args.run / "report.md").is_file()
        and not (args.run / "studies").is_dir()
        and not (args.run / "analysis").is_dir()
    ):
        raise RedkitError(f"{args.run}: no report.md and no studies/ to build a report from")
    print(write_html_report(args.run))
