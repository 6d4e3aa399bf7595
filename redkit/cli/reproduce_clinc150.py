"""`redkit reproduce clinc150`: RED and every reference on CLINC150's 150 in-scope intents in 10
domains, read from the authors' files, with the out-of-scope queries scored by the oos-threshold
protocol (Larson et al. 2019)."""

import argparse
from pathlib import Path

from redkit.cli.command import sub_command
from redkit.cli.fit import fit_kwargs, fit_model_options
from redkit.cli.reproduce import BENCHMARKS


def _options(p: argparse.ArgumentParser) -> None:
    from redkit.data.clinc150 import DEFAULT_DIR

    p.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DIR,
        help="a directory with CLINC150's data_full.json and domains.json (default data/clinc150)",
    )
    p.add_argument("--out", type=Path, default=Path("runs/clinc150"), help="the run directory")
    fit_model_options(p)


@sub_command(BENCHMARKS, "clinc150", _options)
def run(args) -> None:
    from redkit.api import fit

    fit(args.data, args.out, data_format="clinc150", **fit_kwargs(args))
