"""The tuning search, widened where it chose the end of a grid: a value at a grid's edge is a choice the grid
made, not the stream.

    python scripts/incremental_tune_edges.py runs/inc-tune [--save]

Reads <search>/tuned.json (`redkit study incremental-tune`), and for each strategy's own hyperparameters (EWC's
λ, LwF's α, DER++'s α and β) whose chosen value is the largest or smallest of its grid, tries the next value out
(λ ×/÷ 10, α and β ×/÷ 2), on the same tuning stream, scored the same way, the other values at their choice;
while a step out scores strictly better it goes one more, up to STEPS. The rate stays on the grid the search was
given (`--lr`; a step out in the rate changes every later choice, so it is a new search, not a widening). It
appends every run to the search, updates the choice, adds its own command, and writes <search>/tuned.json again
(with --save also redkit_experiments/incremental/tuned.json, which every study reads).
"""

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from redkit.atomic import write_json
from redkit_experiments.incremental.hyperparameters import DEFAULTS, TUNED
from redkit_experiments.incremental.study import StudyContext, run_method
from redkit_experiments.incremental.tuning import IncrementalTuningConfig

FACTOR = {"lambda": 10.0, "alpha": 2.0, "beta": 2.0}  # γ is a decay: its grid (1, 0.9) already holds its edge
STEPS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("search", type=Path, help="the directory of `redkit study incremental-tune`")
    parser.add_argument("--save", action="store_true", help="also write redkit_experiments/incremental/tuned.json")
    args = parser.parse_args()
    tuned = json.loads((args.search / "tuned.json").read_text())
    config = IncrementalTuningConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in tuned["config"].items()})
    context = StudyContext(config.study(), args.search)  # the search's own cached features
    defaults = {group: dict(values) for group, values in DEFAULTS.items()}
    scored = {(r["method"], json.dumps(r["values"], sort_keys=True)): r["final_accuracy"] for r in tuned["search"]}
    for name, chosen in tuned["chosen"].items():
        for key, grid in config.own.get(name, {}).items():
            if key not in FACTOR or chosen[key] not in (max(grid), min(grid)) or len(grid) < 2:
                continue
            outward = FACTOR[key] if chosen[key] == max(grid) else 1 / FACTOR[key]
            best = chosen
            for _ in range(STEPS):
                values = best | {key: best[key] * outward}
                context.config.hyperparameters = defaults | {name: defaults.get(name, {}) | values}
                start = time.perf_counter()
                accuracy = run_method(name, context)["final_accuracy"]
                scored[(name, json.dumps(values, sort_keys=True))] = accuracy
                row = {"method": name, "values": values, "final_accuracy": accuracy, "widened": key}
                tuned["search"].append(row | {"seconds": time.perf_counter() - start})
                print(f"[{name}] {values} -> {accuracy:.4f} ({tuned['search'][-1]['seconds']:.0f} s)")
                if accuracy <= scored[(name, json.dumps(best, sort_keys=True))]:
                    break
                best = values
            chosen = tuned["chosen"][name] = best
    tuned["widened_by"] = " ".join(shlex.quote(w) for w in ["python", *sys.argv])
    write_json(args.search / "tuned.json", tuned)
    if args.save:
        write_json(TUNED, tuned)
    for name, chosen in tuned["chosen"].items():
        print(f"{name}: {chosen}")


if __name__ == "__main__":
    main()
