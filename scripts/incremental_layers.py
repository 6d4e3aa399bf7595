"""Top-2 layers or every layer for the fine-tuning strategies, measured once on the tuning stream (never on test).

    python scripts/incremental_layers.py runs/inc-tune runs/inc-layers --method er_1000 --layers 6

Reads the search that `redkit study incremental-tune --out runs/inc-tune` wrote (its stream, seed, and each
strategy's chosen values), and runs each named strategy with `--layers` top layers tuned over the same learning
rates (the rate that suits two layers need not suit six; `--lr` to try fewer), scored as the search scores: final
accuracy on the val of every step of the tuning stream. Prints both, top-2's from the search itself, and writes
<out>/layers.json.
"""

import argparse
import json
import time
from pathlib import Path

from redkit.atomic import write_json
from redkit.provenance import provenance
from redkit_experiments.incremental.hyperparameters import DEFAULTS
from redkit_experiments.incremental.study import StudyContext, run_method
from redkit_experiments.incremental.tuning import IncrementalTuningConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("search", type=Path, help="the directory of `redkit study incremental-tune`")
    parser.add_argument("out", type=Path)
    parser.add_argument("--method", action="append", required=True, help="a strategy (repeatable)")
    parser.add_argument("--layers", type=int, default=6, help="top layers tuned (default 6: every MiniLM layer)")
    parser.add_argument("--lr", action="append", type=float, default=None, help="rates to try (default: the search's)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: the search's)")
    parser.add_argument("--seed", type=int, default=None, help="the strategies' seed (default: the search's)")
    args = parser.parse_args()
    tuned = json.loads((args.search / "tuned.json").read_text())
    searched = IncrementalTuningConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in tuned["config"].items()}
    )
    study = searched.study()
    study.trainable_layers = args.layers
    study.device = args.device or study.device
    study.seed = study.seed if args.seed is None else args.seed
    context = StudyContext(study, args.out)
    defaults = {group: dict(values) for group, values in DEFAULTS.items()}
    rows = []
    for name in args.method:
        chosen = tuned["chosen"][name]
        # top 2 at the chosen values: the search's own figure (the same stream, seed and code)
        top2 = next(r["final_accuracy"] for r in tuned["search"] if r["method"] == name and r["values"] == chosen)
        for lr in args.lr or searched.lrs:
            context.config.hyperparameters = defaults | {name: defaults.get(name, {}) | chosen | {"lr": lr}}
            start = time.perf_counter()
            accuracy = run_method(name, context)["final_accuracy"]
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "method": name,
                    "lr": lr,
                    "layers": args.layers,
                    "device": study.device,
                    "seed": study.seed,
                    "final_accuracy": accuracy,
                    "top2_chosen_final_accuracy": top2,
                    "seconds": seconds,
                }
            )
            print(
                f"[{name}] lr {lr:g}: {args.layers} layers {accuracy:.4f} ({seconds:.0f} s); "
                f"top 2 at its chosen values {top2:.4f}"
            )
    write_json(args.out / "layers.json", {"search": str(args.search), "rows": rows, "provenance": provenance()})


if __name__ == "__main__":
    main()
