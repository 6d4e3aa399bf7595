"""`redkit reproduce digits`: the original code's 5-domain label-pair benchmark, with its flags
spelled as it spells them (`--data_dir`) and as redkit does (`--data-dir`). Its output directory is
`--out`, as every `reproduce` benchmark's (`--save_dir`, the original code's name, still reads); its
`--run red|moe|all` is the original code's choice of stages, not a directory."""

import argparse
from pathlib import Path

from redkit.cli.command import sub_command
from redkit.cli.options import flag
from redkit.cli.reproduce import BENCHMARKS
from redkit.errors import RedkitError


def _digits_options(p: argparse.ArgumentParser) -> None:
    from redkit_experiments.digits import RUN_MODES
    from redkit_experiments.digits.config import STAGE_NAMES

    flag(
        p,
        "run",
        choices=tuple(RUN_MODES),
        default="all",
        help="red: base, experts, router; moe: base, heads, gate; all: every stage and composition",
    )
    flag(
        p,
        "data_dir",
        type=Path,
        default=None,
        help="the four MNIST IDX files, raw or .gz (default: scikit-learn's 8x8 digits)",
    )
    p.add_argument(
        "--out",
        "--save_dir",
        "--save-dir",
        dest="out",
        type=Path,
        default=Path("runs/digits"),
        help="the run directory",
    )
    flag(p, "device", default="cpu", help="cpu, cuda, cuda:1, ...")
    flag(p, "seed", type=int, default=0)
    flag(p, "val_ratio", type=float, default=0.1, help="of the training images, for early stopping")
    flag(p, "base_ratio", type=float, default=0.1, help="of the training split, for stage base")
    flag(p, "hidden", type=int, default=128, help="the MLP backbone's width d")
    flag(p, "rank", type=int, default=0, help="residual expert rank (default d/4)")
    flag(p, "batch_size", type=int, default=None, help="micro-batch of every stage (default: per stage)")
    flag(p, "virtual_batch_size", type=int, default=None, help="gradient-accumulation batch of every stage")
    flag(p, "patience", type=int, default=None, help="epochs without a better val loss before stopping (default 10)")
    flag(p, "max_epochs", type=int, default=None, help="cap every stage's epochs")
    for stage in STAGE_NAMES:
        flag(p, f"max_epochs_{stage}", type=int, default=None, help=f"cap stage {stage}'s epochs")


def digits_config(args):
    """The DigitsConfig `reproduce digits` would run with these flags (nothing written)."""
    from redkit_experiments.digits import DigitsConfig
    from redkit_experiments.digits.backbone import MLPBackboneConfig
    from redkit_experiments.digits.config import STAGE_NAMES

    config = DigitsConfig(
        seed=args.seed,
        device=args.device,
        expert_rank=args.rank,
        data_dir=str(args.data_dir.resolve()) if args.data_dir else None,
        val_ratio=args.val_ratio,
        base_ratio=args.base_ratio,
        backbone=MLPBackboneConfig(hidden=args.hidden),
    )
    for name in ("batch_size", "virtual_batch_size", "max_epochs"):
        if getattr(args, name) is not None:
            config.set_for_stages(**{name: getattr(args, name)})
    for stage in STAGE_NAMES:
        if getattr(args, f"max_epochs_{stage}") is not None:
            config.set_for_stages((stage,), max_epochs=getattr(args, f"max_epochs_{stage}"))
    if args.patience is not None:
        config.train.patience = args.patience
    return config


@sub_command(BENCHMARKS, "digits", _digits_options)
def reproduce_digits(args) -> None:
    from redkit_experiments.digits import reproduce_digits

    config = digits_config(args)
    if args.data_dir is not None and not args.data_dir.is_dir():  # refuse a bad path before anything is written
        raise RedkitError(f"MNIST directory not found: {args.data_dir}")
    reproduce_digits(args.out, config, args.run)
