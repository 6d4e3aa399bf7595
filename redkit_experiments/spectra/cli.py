"""`redkit reproduce spectra`: the routing-quality protocol's routers at token level inside a tiny Mixtral trained on
code / math / prose (redkit_experiments.spectra); its tables, figures and verdicts in <out>/report.md and report.html."""

import argparse
from pathlib import Path

from redkit.cli.command import sub_command
from redkit.cli.reproduce import BENCHMARKS
from redkit.errors import RedkitError


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise RedkitError(f"{flag} {text!r}: expected comma-separated integers, e.g. 4,8,16,32") from None


def _spectra_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/spectra"))
    p.add_argument("--experts", type=int, default=8, help="E experts per MoE layer (default 8; top-2)")
    p.add_argument("--steps", type=int, default=None, help="training steps per variant (default 200)")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (at least 3 for the verdicts; default 1)")
    p.add_argument(
        "--seed-list", default="", help="exactly these seeds, e.g. 2 (run seeds in parallel processes into one --out)"
    )
    p.add_argument(
        "--variants",
        default="",
        help="comma-separated variant names (default: all; see redkit_experiments.spectra.model)",
    )
    p.add_argument("--sweep", default="", help="E values for Table 11, e.g. 4,8,16,32 (default: none)")
    p.add_argument("--sweep-seeds", default="", help="the seeds that run the sweep, e.g. 0 (default: every seed)")
    p.add_argument(
        "--replacement-steps",
        type=int,
        default=None,
        help="steps of the router-replacement arms (0 = none; default steps/3)",
    )
    p.add_argument(
        "--measure-every",
        type=int,
        default=None,
        help="steps between two routing measurements of the probe (default 10)",
    )
    p.add_argument("--eval-sequences", type=int, default=None, help="held-out windows per domain (default 16)")
    p.add_argument("--clinc", default="", help="CLINC150 data_full.json (default data/clinc150/data_full.json)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (default 0: every core; 1 when seeds run in parallel processes)",
    )


def spectra_config(args):
    """The ExperimentConfig these flags give (every check made, nothing written)."""
    from redkit_experiments.spectra.corpus import CorpusConfig
    from redkit_experiments.spectra.experiment import ExperimentConfig
    from redkit_experiments.spectra.model import ModelConfig
    from redkit_experiments.spectra.train import TrainConfig

    if args.seeds < 1:
        raise RedkitError(f"--seeds {args.seeds}: must be at least 1")
    model = ModelConfig(experts=args.experts)  # --experts 1 fails here
    train = TrainConfig()
    if args.steps is not None:
        train.steps = args.steps
    if args.measure_every is not None:
        if args.measure_every < 1:
            raise RedkitError(f"--measure-every {args.measure_every}: must be at least 1")
        train.measure_every = args.measure_every
    seeds = _ints(args.seed_list, "--seed-list") or tuple(range(args.seeds))
    config = ExperimentConfig(
        corpus=CorpusConfig(clinc_path=args.clinc),
        model=model,
        train=train,
        seeds=seeds,
        sweep=_ints(args.sweep, "--sweep"),
        sweep_seeds=_ints(args.sweep_seeds, "--sweep-seeds"),
        threads=args.threads,
        replacement_steps=args.replacement_steps if args.replacement_steps is not None else max(train.steps // 3, 1),
        **({"variants": tuple(v.strip() for v in args.variants.split(",") if v.strip())} if args.variants else {}),
        **({"eval_sequences": args.eval_sequences} if args.eval_sequences else {}),
    )
    if args.clinc and not Path(args.clinc).is_file():
        raise RedkitError(f"--clinc {args.clinc}: no such file")
    return config


@sub_command(BENCHMARKS, "spectra", _spectra_options)
def reproduce_spectra(args) -> None:
    from redkit_experiments.spectra.experiment import run_experiment
    from redkit_experiments.spectra.report import table_61, table_hypotheses

    results = run_experiment(args.out, spectra_config(args))
    print(table_61(results["tables"]))
    print()
    print(table_hypotheses(results["tables"]["hypotheses"]))
    print(f"\nreport: {args.out / 'report.md'} and {args.out / 'report.html'}")
