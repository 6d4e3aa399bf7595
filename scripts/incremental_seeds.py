"""The incremental study over seeds: each method's mean ± sd, and RED against the three strongest other methods
and `joint` by a paired t-test over the seeds (docs/results/incremental.md).

    python scripts/incremental_seeds.py runs/inc-d0 runs/inc-d0-s1 runs/inc-d0-s2     # one study per seed
    python scripts/incremental_seeds.py ... --method red --method red_tuned          # each RED against the others

Each directory is one `redkit study incremental` of the same data, protocol and order with another `--seed` (the
owners' training, the random maps, the adapters' and fine-tuning strategies' initialisation and batches).
"""

import argparse
import json
from pathlib import Path

from redkit_experiments.study.stats import paired_t_p, t_interval, verdict

FIGURES = ("final_accuracy", "average_incremental_accuracy", "forgetting")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("studies", nargs="+", type=Path, help="study directories, one per seed")
    parser.add_argument(
        "--method", action="append", default=None, help="the method(s) tested against the others (default: red)"
    )
    args = parser.parse_args()
    tested = args.method or ["red"]
    results = [json.loads((d / "results.json").read_text()) for d in args.studies]
    keys = {(r["protocol"], r["order"], tuple(r["steps"])) for r in results}
    if len(keys) != 1:
        raise SystemExit("the studies differ in protocol, order or steps: one study per seed of the same stream")
    seeds = [r["config"]["seed"] for r in results]
    names = [n for n in results[0]["methods"] if all(n in r["methods"] for r in results)]
    final = {n: [r["methods"][n]["final_accuracy"] for r in results] for n in names}
    print(f"seeds {seeds}")
    print("| method | " + " | ".join(FIGURES) + " | final by seed |")
    print("|---|" + "---|" * (len(FIGURES) + 1))
    for name in sorted(names, key=lambda n: -t_interval(final[n])["mean"]):
        cells = []
        for figure in FIGURES:
            values = [r["methods"][name].get(figure) for r in results]
            cells.append("-" if None in values else "{mean:.4f} ± {sd:.4f}".format(**t_interval(values)))
        print(f"| {name} | " + " | ".join(cells) + " | " + ", ".join(f"{v:.4f}" for v in final[name]) + " |")
    for red in tested:
        others = [n for n in names if n not in (*tested, "joint")]
        strongest = sorted(others, key=lambda n: -t_interval(final[n])["mean"])[:3] + ["joint"] * ("joint" in names)
        print(f"\n| {red} against | mean difference | per seed | paired t p | {red} better? |\n|---|---|---|---|---|")
        for name in strongest:
            diffs = [a - b for a, b in zip(final[red], final[name])]
            p = paired_t_p(final[red], final[name])
            print(
                f"| {name} | {sum(diffs) / len(diffs):+.4f} | {', '.join(f'{d:+.4f}' for d in diffs)} | "
                f"{'-' if p is None else f'{p:.3f}'} | {verdict(diffs, p)} |"
            )


if __name__ == "__main__":
    main()
