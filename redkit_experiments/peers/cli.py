"""`redkit reproduce peers`: RED beside peft's LoRA experts on a finished Task 1 or Task 2 run."""

import argparse
from pathlib import Path

from redkit.cli.command import sub_command
from redkit.cli.options import router_option
from redkit.cli.reproduce import BENCHMARKS
from redkit_experiments.arithmetic.cli import add_run_options, run_config


def _peers_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", choices=("task1", "task2"), default="task1")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the run to build on (default runs/<task>[-random]); made first if it has no results.json",
    )
    p.add_argument("--lora-rank", type=int, default=8, help="rank r of each LoRA expert (default 8)")
    p.add_argument("--lora-alpha", type=int, default=16, help="LoRA alpha (default 16: updates scaled by 2)")
    p.add_argument(
        "--lora-targets",
        default="",
        help="comma-separated name suffixes of the top layers' Linear "
        "modules to adapt, e.g. query,value (default: all)",
    )
    p.add_argument(
        "--examples-per-expert",
        type=int,
        default=4000,
        help="training examples per LoRA expert (0 = all; default 4000)",
    )
    p.add_argument(
        "--val-per-expert", type=int, default=500, help="validation examples per LoRA expert (0 = all; default 500)"
    )
    p.add_argument("--lora-epochs", type=int, default=8, help="epoch cap of each LoRA expert (default 8, patience 2)")
    p.add_argument("--arrow-top-k", type=int, default=3, help="experts per token in Arrow (peft's default 3)")
    p.add_argument("--eval-split", default="test", help="the split every composition is scored on (default test)")
    p.add_argument("--no-xlora", action="store_true", help="skip X-LoRA (loading it, training its classifier, its row)")
    p.add_argument(
        "--xlora-examples",
        type=int,
        default=1000,
        help="training examples of X-LoRA's classifier, balanced over the domains (default 1000)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared 2-core machine far faster than 2; 0 = torch's default)",
    )
    add_run_options(p)  # used only when the run has to be made
    router_option(p)


@sub_command(BENCHMARKS, "peers", _peers_options)
def reproduce_peers(args) -> None:
    from redkit_experiments.peers import require_peft

    require_peft()  # before anything is trained
    from redkit_experiments.peers.arrow import ArrowSettings
    from redkit_experiments.peers.benchmark import PeersConfig, finished_run, reproduce_peers
    from redkit_experiments.peers.lora import LoraExpertConfig

    lora = LoraExpertConfig(
        rank=args.lora_rank,
        alpha=args.lora_alpha,
        examples=args.examples_per_expert,
        val_examples=args.val_per_expert,
        targets=tuple(t.strip() for t in args.lora_targets.split(",") if t.strip()),
    )
    lora.train.max_epochs = args.lora_epochs
    config = PeersConfig(
        lora=lora,
        arrow=ArrowSettings(top_k=args.arrow_top_k),
        split=args.eval_split,
        xlora=not args.no_xlora,
        threads=args.threads,
    )
    config.xlora_settings.examples = args.xlora_examples
    config.xlora_settings.train.max_epochs = min(config.xlora_settings.train.max_epochs, args.lora_epochs)
    out = args.out or Path("runs") / (args.task + ("" if args.split == "structure" else f"-{args.split}"))
    reproduce_peers(finished_run(out, args.task, lambda: run_config(args, args.task)), config)
