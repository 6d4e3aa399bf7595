"""Top 2 or every layer, decided over every fine-tuning strategy and several seeds of the tuning stream.

    python scripts/incremental_layers_summary.py runs/gpu-layers/*/layers.json

Reads what `scripts/incremental_layers.py` wrote (one row per strategy, layers, rate and seed; a row without a
seed is the search's, 0) and decides as the issue's rule says, the better of the two, then fixed for every
strategy, without choosing on the same numbers it compares:

    every layer's rate    per strategy, the best of its rates on the search's seed (0)
    top 2's               the rate (and own values) the search chose, as tuned.json says
    the comparison        on the other seeds only: there neither side was chosen (seed 0's every-layer figure is
                          the maximum of several rates, the top 2's of one), one pair per strategy and seed,
                          a paired t-test over the pairs

Prints a Markdown table and the verdict; never reads test (the tuning stream scores its val).
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

from scipy import stats

from redkit_experiments.incremental.hyperparameters import TUNED

SEARCH_SEED = 0


def read_rows(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            rows.append(row)
    return rows


def summarize(rows: list[dict], chosen: dict[str, dict]) -> dict:
    """`rows` as layers.json holds them (a row without a seed is the search's). Per strategy: every layer's rate (best on the search's seed), each side's accuracy by seed, and over the
    other seeds the differences (every layer - top 2) and a paired t-test over all of them."""
    accuracy = defaultdict(dict)  # (method, layers, lr) -> {seed: final accuracy}
    seconds = defaultdict(list)  # (method, layers) -> seconds of each run at the compared rate
    for r in rows:
        accuracy[r["method"], r["layers"], r["lr"]][r.get("seed", SEARCH_SEED)] = r["final_accuracy"]
    strategies = {}
    for method in sorted({m for m, _, _ in accuracy}):
        every = {lr: by for (m, layers, lr), by in accuracy.items() if m == method and layers > 2}
        top2 = accuracy.get((method, 2, chosen[method]["lr"]), {})
        on_search = {lr: by[SEARCH_SEED] for lr, by in every.items() if SEARCH_SEED in by}
        if not on_search or not top2:
            continue
        lr = max(on_search, key=lambda r: (on_search[r], -r))  # ties: the smaller rate
        seeds = sorted((set(every[lr]) & set(top2)) - {SEARCH_SEED})
        for r in rows:
            if r["method"] == method and (r["layers"], r["lr"]) in ((2, chosen[method]["lr"]), (6, lr)):
                seconds[method, r["layers"]].append(r["seconds"])
        strategies[method] = {
            "every_layer_lr": lr,
            "top2_lr": chosen[method]["lr"],
            "every_layer": every[lr],
            "top2": top2,
            "differences": [every[lr][s] - top2[s] for s in seeds],
            "seconds": {layers: sum(v) / len(v) for (m, layers), v in seconds.items() if m == method},
        }
    differences = [d for s in strategies.values() for d in s["differences"]]
    mean = sum(differences) / len(differences) if differences else float("nan")
    p = float(stats.ttest_1samp(differences, 0.0).pvalue) if len(differences) > 1 else float("nan")
    return {
        "strategies": strategies,
        "pairs": len(differences),
        "mean_difference": mean,
        "p": p,
        "every_layer_wins": bool(mean > 0 and p < 0.05),
    }


def markdown(summary: dict) -> str:
    lines = [
        "| strategy | every layer: rate | top 2: rate | every layer by seed | top 2 by seed | difference, other seeds |"
        " seconds (every layer, top 2) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, s in summary["strategies"].items():

        def by_seed(by):
            return ", ".join(f"{by[k]:.4f}" for k in sorted(by))

        lines.append(
            f"| `{method}` | {s['every_layer_lr']:g} | {s['top2_lr']:g} | {by_seed(s['every_layer'])} | "
            f"{by_seed(s['top2'])} | {', '.join(f'{d:+.4f}' for d in s['differences'])} | "
            f"{s['seconds'].get(6, float('nan')):.0f}, {s['seconds'].get(2, float('nan')):.0f} |"
        )
    verdict = "every layer" if summary["every_layer_wins"] else "the top 2 (every layer is not better)"
    lines.append(
        f"\nOver the other seeds' {summary['pairs']} pairs: every layer - top 2 = {summary['mean_difference']:+.4f} "
        f"on average, paired t-test p = {summary['p']:.3f}. Kept: {verdict}."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="+", type=Path, help="layers.json files of scripts/incremental_layers.py")
    parser.add_argument("--tuned", type=Path, default=TUNED, help="the search's choices (default: the study's)")
    args = parser.parse_args()
    chosen = json.loads(args.tuned.read_text())["chosen"]
    print(markdown(summarize(read_rows(args.layers), chosen)))


if __name__ == "__main__":
    main()
