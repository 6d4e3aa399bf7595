"""The leading methods' final accuracy on several streams, side by side, `joint` as each stream's line.

    python scripts/incremental_final_plot.py docs/results/figures/incremental_final.png \
        "CLINC150 domains=runs/all-d0-s0,runs/all-d0-s1,runs/all-d0-s2" "CLINC150 classes=runs/rf-c0" \
        "BANKING77=runs/rf-b77" "SGD=runs/rf-sgd"

Each stream is NAME=DIR[,DIR...]: several directories (one per seed) give the mean and the sd as an error bar.
"""

import argparse
import json
from pathlib import Path

import numpy as np

METHODS = ("red_tuned", "red", "ranpac", "ranpac_fsa", "klda_e", "gaussian", "simplecil", "er_1000")


def final(directories: list[Path], method: str) -> list[float]:
    return [json.loads((d / "results.json").read_text())["methods"][method]["final_accuracy"] for d in directories]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("streams", nargs="+", help="NAME=DIR[,DIR...]")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    streams = [(s.split("=", 1)[0], [Path(d) for d in s.split("=", 1)[1].split(",")]) for s in args.streams]
    width = 0.8 / len(METHODS)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    colors = plt.get_cmap("tab10").colors
    for i, method in enumerate(METHODS):
        values = [final(dirs, method) for _, dirs in streams]
        means = [np.mean(v) for v in values]
        errors = [np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in values]
        x = np.arange(len(streams)) + (i - (len(METHODS) - 1) / 2) * width
        ax.bar(x, means, width, yerr=errors, label=method, color=colors[i % 10], edgecolor="black" if i == 0 else None)
    for k, (_, dirs) in enumerate(streams):
        joint = np.mean(final(dirs, "joint"))
        ax.hlines(joint, k - 0.45, k + 0.45, colors="black", linestyles="dashed", label="joint" if k == 0 else None)
    ax.set_xticks(np.arange(len(streams)), [name for name, _ in streams])
    ax.set_ylim(0.8, 1.0)
    ax.set_ylabel("final test accuracy, every class seen")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=5, fontsize=8, loc="upper right")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
