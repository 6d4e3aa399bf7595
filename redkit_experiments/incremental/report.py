"""The incremental study's report: one row per method (final and average incremental accuracy, forgetting,
backward transfer, what it keeps, seconds), out-of-scope queries after the last step, and the plot of
accuracy over the classes seen after each step, one line per method."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.atomic import write_text  # noqa: E402
from redkit.report import markdown_table, run_footer, save_figure  # noqa: E402
from redkit_experiments.incremental.hyperparameters import reads_hyperparameters  # noqa: E402


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def figure_steps(out: Path, results: dict) -> str:
    """Accuracy after each step, one line per method: up to 20 methods told apart (tab20, the dark shades first),
    the fine-tuning strategies dashed, RED thick and black, `joint` a star where it was retrained."""
    fig, ax = plt.subplots(figsize=(8, 5))
    steps, colours = len(results["steps"]), plt.get_cmap("tab20").colors
    for i, (name, result) in enumerate(results["methods"].items()):
        points = [(r["step"], r["seen_accuracy"]) for r in result["per_step"] if "seen_accuracy" in r]
        style = {"color": colours[(2 * i) % 20 + (2 * i) // 20], "linewidth": 1.3, "marker": "o", "markersize": 3}
        if reads_hyperparameters(name):
            style |= {"linestyle": "--"}
        if name == "red":
            style |= {"color": "black", "linewidth": 2.6}
        if len(points) < steps:  # joint, retrained at some steps only: points, not a line
            style |= {"linestyle": "none", "marker": "*", "markersize": 11}
        ax.plot(*zip(*points), **style, label=name)
    ax.set_xticks(range(1, steps + 1))
    ax.set_xlabel(f"step ({results['protocol']} protocol, order {results['order']})")
    ax.set_ylabel("test accuracy over every class seen")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="lower left")
    return save_figure(fig, out / "figures" / "accuracy_by_step.png")


def render_report(results: dict, figure: str | None) -> str:
    methods = results["methods"]
    devices = results.get("devices", {})  # a merged study's (scripts/incremental_merge.py): where each method ran
    on_several = len(set(devices.values())) > 1
    rows = [
        [
            f"**{name}**" if name == "red" else name,
            _f(m.get("final_accuracy")),
            _f(m.get("average_incremental_accuracy")),
            _f(m.get("forgetting")),
            _f(m.get("backward_transfer")),
            m["keeps"],
            f"{m['stored_examples']:,}",
            _bytes(m["stored_bytes"]),
            _bytes(m.get("stored_from_data_bytes", 0)),
            f"{m['seconds']:.0f}",
        ]
        + ([devices.get(name, "cpu")] if on_several else [])
        for name, m in methods.items()
    ]
    out = [
        f"# Incremental study: {results['protocol']} protocol, order {results['order']}",
        "",
        f"{len(results['steps'])} steps, {results['classes']} classes; steps in order: {', '.join(results['steps'])}.",
        "Accuracy is over the test queries of every step seen, with no step or domain id. Kept: what the method "
        "holds from earlier steps beside the model it predicts with (examples, features, statistics, old weights); "
        "of which data: the examples, features and statistics among them (numbers computed directly from earlier "
        "steps' examples), as opposed to weights trained on them.",
        "",
        markdown_table(
            [
                "Method",
                "Final",
                "Avg incremental",
                "Forgetting",
                "BWT",
                "Keeps",
                "Examples kept",
                "Bytes kept",
                "of which data",
                "Seconds",
            ]
            + (["Device"] if on_several else []),
            rows,
        ),
        "",
    ]
    with_oos = {name: m["oos"] for name, m in methods.items() if "oos" in m}
    if with_oos:
        out += [
            "## Out-of-scope queries after the last step (Larson et al.: max softmax probability, threshold on val)",
            "",
            markdown_table(
                ["Method", "In-scope accuracy", "OOS recall", "AUROC"],
                [[n, _f(o["in_scope_accuracy"]), _f(o["oos_recall"]), _f(o["auroc"])] for n, o in with_oos.items()],
            ),
            "",
        ]
    if figure:
        out += [f"![Accuracy after each step]({figure})", ""]
    return "\n".join(out + run_footer(results))


def write_report(out: Path, results: dict) -> str:
    text = render_report(results, figure_steps(out, results))
    write_text(out / "report.md", text)
    return text
