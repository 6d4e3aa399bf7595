"""The markdown report of a Task 1/2 run, laid out like the paper's §4.6 tables, with its figures."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.atomic import write_text  # noqa: E402
from redkit.report import LABELS, figure_weights, markdown_table, run_footer, save_figure  # noqa: E402
from redkit_experiments.arithmetic.vocabulary import BOUNDARY_ANSWERS, SHORT_NAMES  # noqa: E402


def _f(x: float) -> str:
    return f"{x:.4f}"


def _figure_per_range(directory: Path, split_results: dict) -> str:
    names = list(split_results)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [split_results[name]["per_range"].get(r, {}).get("accuracy", 0.0) for r in SHORT_NAMES]
        ax.bar([k + i * width for k in range(len(SHORT_NAMES))], values, width, label=name)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(SHORT_NAMES))], SHORT_NAMES)
    ax.set_ylabel("exact accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(ncol=3, fontsize=7, loc="lower left")
    ax.set_title("Exact accuracy by answer range (test)")
    return save_figure(fig, directory / "figures" / "per_range_accuracy.png")


def render_report(results: dict, figures: dict[str, str] | None = None) -> str:
    test = results["splits"]["test"]
    split_kind = results["config"]["data"]["split"]
    out = [f"# {results['task']}: results ({split_kind} split, seed {results['seed']})", ""]
    out += [
        "## Overall performance (test; cf. §4.6.1)",
        "",
        markdown_table(
            ["Method", "Accuracy", "Range accuracy", "Macro-F1"],
            [
                [LABELS.get(n, n), _f(m["accuracy"]), _f(m["range_accuracy"]), _f(m["macro_f1"])]
                for n, m in test.items()
            ],
        ),
        "",
    ]
    out += [
        "## Accuracy by range (test; cf. §4.6.2)",
        "",
        markdown_table(
            ["Method", *SHORT_NAMES],
            [
                [LABELS.get(n, n), *(_f(m["per_range"][r]["accuracy"]) for r in SHORT_NAMES if r in m["per_range"])]
                for n, m in test.items()
            ],
        ),
        "",
    ]
    out += [
        "## Macro-F1 by range (test; cf. §4.6.3)",
        "",
        "Over the classes with support in the range; in brackets the paper's F1 over all 99 classes.",
        "",
        markdown_table(
            ["Method", *SHORT_NAMES],
            [
                [
                    LABELS.get(n, n),
                    *(
                        f"{_f(m['per_range'][r]['macro_f1'])} ({m['per_range'][r]['macro_f1_99']:.3f})"
                        for r in SHORT_NAMES
                        if r in m["per_range"]
                    ),
                ]
                for n, m in test.items()
            ],
        ),
        "",
    ]
    out += [
        "## Router reliability (cf. §4.6.4)",
        "",
        markdown_table(
            ["Split", "RED router accuracy", "Router macro-F1", "MoE gate top-1 = range"],
            [
                [s, _f(r["accuracy"]), _f(r["macro_f1"]), _f(results["gate"][s]["accuracy"])]
                for s, r in results["router"].items()
            ],
        ),
        "",
    ]
    boundary_names = [b for b in map(str, BOUNDARY_ANSWERS) if b in test["red"]["boundary"]]
    out += [
        "## Accuracy at range boundaries (test; cf. §4.6.5)",
        "",
        markdown_table(
            ["Method", *boundary_names],
            [[LABELS.get(n, n), *(_f(m["boundary"][b]["accuracy"]) for b in boundary_names)] for n, m in test.items()],
        ),
        "",
    ]
    for group, title in (("operands", "number of operands"), ("pattern", "operator pattern")):
        keys = list(test["red"].get(f"by_{group}", {}))
        if keys:
            out += [
                f"## Accuracy by {title} (test; cf. §4.7.4)",
                "",
                markdown_table(
                    ["Method", *(f"{k} (n={test['red'][f'by_{group}'][k]['n']})" for k in keys)],
                    [[LABELS.get(n, n), *(_f(m[f"by_{group}"][k]["accuracy"]) for k in keys)] for n, m in test.items()],
                ),
                "",
            ]
    other = {f"{s} split": r for s, r in results["splits"].items() if s != "test"} | results.get("external", {})
    if other:
        out += [
            "## Other evaluation sets (exact accuracy)",
            "",
            markdown_table(
                ["Method", *other], [[LABELS.get(n, n), *(_f(other[k][n]["accuracy"]) for k in other)] for n in test]
            ),
            "",
        ]
    if figures:
        out += ["## Figures", ""] + [f"![{name}]({path})" for name, path in figures.items()] + [""]
    return "\n".join(out + run_footer(results))


def write_report(directory: Path, results: dict, domains: tuple[str, ...] = SHORT_NAMES) -> str:
    """`domains`: the run's experts' domains (the ranges R1..R5, or K equal-width parts with --experts K)."""
    test = results["splits"]["test"]
    what = "range" if tuple(domains) == tuple(SHORT_NAMES) else "part"
    figures = {
        "Exact accuracy by range": _figure_per_range(directory, test),
        f"Mean expert weight by true {what}": figure_weights(directory, test, tuple(domains), what),
    }
    text = render_report(results, figures)
    write_text(directory / "report.md", text)
    return text
