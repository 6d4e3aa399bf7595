"""How the toy results read: markdown tables and a true-vs-predicted figure.

Both take the results dict that `reproduce_toy` writes to toy_results.json, so a report can be
rebuilt from the JSON alone without rerunning anything (the figure also needs the predictions).
"""

from pathlib import Path

import numpy as np

from redkit.atomic import atomic_path
from redkit_experiments.toy.data import INTERVALS, OFF_DIAGONAL, Grid, interval_name

_LEGEND = (
    "Accuracy = fraction of pairs (a, b) with round(200 * y_hat) == a + b. Column `L-U`: the pairs "
    "with both operands in [L, U] (expert domain D_i); `off-diagonal`: operands in different "
    "intervals, seen by no module in training; `all`: the whole 100 x 100 grid."
)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _modules_table(modules: dict[str, dict]) -> str:
    linear = any("weight" in info for info in modules.values())
    header = ["module", "trained on", "train MSE"] + (["w1", "w2", "b"] if linear else [])
    rows = []
    for name, info in modules.items():
        row = [name, info["domain"], f"{info['train_mse']:.2e}"]
        if "weight" in info:
            row += [f"{w:.4f}" for w in info["weight"]] + [f"{info['bias']:+.4f}"]
        elif linear:
            row += ["", "", ""]
        rows.append(row)
    return _table(header, rows)


def format_tables(results: dict) -> str:
    """Markdown: per experiment, an accuracy table (rows = settings, columns = intervals + off-diagonal
    + all) and a table of the trained modules (final train MSE; weights of linear ones)."""
    columns = results["columns"]
    parts = [f"# Toy experiments A/B/C (seed {results['seed']})", "", _LEGEND]
    for key, experiment in results["experiments"].items():
        acc_rows = [[name] + [f"{acc[c]:.3f}" for c in columns] for name, acc in experiment["accuracy"].items()]
        parts += [
            "",
            f"## Experiment {key}: {experiment['title']}",
            "",
            _table(["setting"] + columns, acc_rows),
            "",
            _modules_table(experiment["modules"]),
        ]
    if "wall_s" in results:
        parts += ["", f"Wall time: {results['wall_s']:.1f} s."]
    return "\n".join(parts) + "\n"


def plot_true_vs_pred(path: Path, grid: Grid, results: dict, predictions: dict[str, dict[str, np.ndarray]]) -> None:
    """One panel per setting (rows = experiments): true a + b against predicted 200 * y_hat on all
    10,000 pairs, coloured by expert domain, off-diagonal pairs in grey. A perfect model lies on
    the dashed diagonal. The y axis is clipped to [-20, 220] so that a wild setting cannot squash
    the others' scale; points outside are pinned to the edge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    true = (grid.a + grid.b).numpy()  # (N,)
    domain = np.full(true.shape, -1)  # (N,) index of the interval holding both operands, -1 if none
    for i, interval in enumerate(INTERVALS):
        domain[grid.in_interval(interval).numpy()] = i
    n_rows, n_cols = len(predictions), max(len(p) for p in predictions.values())
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(2.3 * n_cols, 2.5 * n_rows), squeeze=False, sharex=True, sharey=True
    )
    colours = plt.get_cmap("tab10")
    for row, (key, settings) in enumerate(predictions.items()):
        accuracy = results["experiments"][key]["accuracy"]
        for col, (name, pred) in enumerate(settings.items()):
            ax = axes[row, col]
            pred = np.clip(pred, -20, 220)
            off = domain < 0
            ax.scatter(true[off], pred[off], s=1, c="0.75", rasterized=True, label=OFF_DIAGONAL)
            for i, interval in enumerate(INTERVALS):
                on = domain == i
                ax.scatter(true[on], pred[on], s=1, color=colours(i), rasterized=True, label=interval_name(interval))
            ax.plot([0, 200], [0, 200], "k--", lw=0.7)
            ax.set_title(f"{key}: {name}\nall {accuracy[name]['all']:.3f}", fontsize=7)
            ax.set_ylim(-20, 220)
            ax.tick_params(labelsize=6)
        for col in range(len(settings), n_cols):
            axes[row, col].axis("off")
    fig.supxlabel("true a + b", fontsize=8)
    fig.supylabel("predicted 200 * y_hat", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=6, markerscale=4)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
