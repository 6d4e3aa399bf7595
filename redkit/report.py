"""The markdown report of a run, laid out like the paper's §4.6 tables, with its figures."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.atomic import atomic_path, write_text  # noqa: E402
from redkit.data.vocabulary import BOUNDARY_ANSWERS, SHORT_NAMES  # noqa: E402

LABELS = {"global_10pct": "Global head (base's classifier C)", "global_full": "Global head (100% data)",
          "oracle": "Oracle per-range heads", "uniform": "Uniform avg (all_fixed)", "moe": "MoE gating (softmax)",
          "red": "**RED (router)**", "red_oracle": "RED, oracle α", "red_uniform": "RED, uniform α (AllFix)",
          "red_logits": "RED in logit space (original code)",
          "red_within": "**RED within domains** (p(y) = α_d(y) p_d(y))", "red_within_oracle": "RED within domains, oracle α",
          "red_mixture": "RED mixing its experts' outputs (Σ α_i p_i)",
          "domain_oracle": "C alone within the true domain's labels (no expert)",
          "joint": "joint (backbone + classifier fine-tuned on 100% of train)", "linear_probe": "linear probe (frozen features, LR)"}


def _f(x: float) -> str:
    return f"{x:.4f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


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


def figure_weights(directory: Path, split_results: dict, domains: tuple[str, ...] = SHORT_NAMES, what: str = "range") -> str:
    """Mean expert weight (columns: experts) by true domain (rows) of red and moe."""
    panels = [n for n in ("red", "moe") if "mean_weights_by_domain" in split_results.get(n, {})]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, name in zip(axes[0], panels):
        weights = split_results[name]["mean_weights_by_domain"]
        matrix = [weights[r] for r in domains if r in weights]
        image = ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(domains)), [f"E{k + 1}" for k in range(len(domains))])
        ax.set_yticks(range(len(matrix)), [r for r in domains if r in weights])
        ax.set_xlabel("expert")
        ax.set_ylabel(f"true {what}")
        ax.set_title(f"{name}: mean expert weight")
        fig.colorbar(image, ax=ax, fraction=0.046)
    return save_figure(fig, directory / "figures" / "expert_weights.png")


def save_figure(fig, path: Path) -> str:
    """Save as PNG (atomically) and return its path relative to the folder above its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return str(path.relative_to(path.parent.parent))


def run_footer(results: dict) -> list[str]:
    """The closing lines of every report: wall time per stage, and where the numbers came from."""
    out = []
    times = results.get("wall_seconds_per_stage", {})
    if times:
        out += ["## Wall time per stage (seconds)", "", markdown_table(list(times), [[f"{t:.1f}" for t in times.values()]]), ""]
    prov = results.get("provenance", {})
    if prov:
        out += [f"redkit {prov.get('redkit')} · commit {prov.get('git_commit')} · "
                + ", ".join(f"{k} {v}" for k, v in prov.get("versions", {}).items()), ""]
    return out


def render_report(results: dict, figures: dict[str, str] | None = None) -> str:
    test = results["splits"]["test"]
    split_kind = results["config"]["data"]["split"]
    out = [f"# {results['task']}: results ({split_kind} split, seed {results['seed']})", ""]
    out += ["## Overall performance (test; cf. §4.6.1)", "",
            markdown_table(["Method", "Accuracy", "Range accuracy", "Macro-F1"],
                   [[LABELS.get(n, n), _f(m["accuracy"]), _f(m["range_accuracy"]), _f(m["macro_f1"])] for n, m in test.items()]), ""]
    out += ["## Accuracy by range (test; cf. §4.6.2)", "",
            markdown_table(["Method", *SHORT_NAMES], [[LABELS.get(n, n), *(_f(m["per_range"][r]["accuracy"]) for r in SHORT_NAMES if r in m["per_range"])]
                                               for n, m in test.items()]), ""]
    out += ["## Macro-F1 by range (test; cf. §4.6.3)", "",
            "Over the classes with support in the range; in brackets the paper's F1 over all 99 classes.", "",
            markdown_table(["Method", *SHORT_NAMES], [[LABELS.get(n, n), *(f"{_f(m['per_range'][r]['macro_f1'])} ({m['per_range'][r]['macro_f1_99']:.3f})"
                                                                    for r in SHORT_NAMES if r in m["per_range"])] for n, m in test.items()]), ""]
    out += ["## Router reliability (cf. §4.6.4)", "",
            markdown_table(["Split", "RED router accuracy", "Router macro-F1", "MoE gate top-1 = range"],
                   [[s, _f(r["accuracy"]), _f(r["macro_f1"]), _f(results["gate"][s]["accuracy"])] for s, r in results["router"].items()]), ""]
    boundary_names = [b for b in map(str, BOUNDARY_ANSWERS) if b in test["red"]["boundary"]]
    out += ["## Accuracy at range boundaries (test; cf. §4.6.5)", "",
            markdown_table(["Method", *boundary_names], [[LABELS.get(n, n), *(_f(m["boundary"][b]["accuracy"]) for b in boundary_names)]
                                                 for n, m in test.items()]), ""]
    for group, title in (("operands", "number of operands"), ("pattern", "operator pattern")):
        keys = list(test["red"].get(f"by_{group}", {}))
        if keys:
            out += [f"## Accuracy by {title} (test; cf. §4.7.4)", "",
                    markdown_table(["Method", *(f"{k} (n={test['red'][f'by_{group}'][k]['n']})" for k in keys)],
                           [[LABELS.get(n, n), *(_f(m[f"by_{group}"][k]["accuracy"]) for k in keys)] for n, m in test.items()]), ""]
    other = {f"{s} split": r for s, r in results["splits"].items() if s != "test"} | results.get("external", {})
    if other:
        out += ["## Other evaluation sets (exact accuracy)", "",
                markdown_table(["Method", *other], [[LABELS.get(n, n), *(_f(other[k][n]["accuracy"]) for k in other)] for n in test]), ""]
    if figures:
        out += ["## Figures", ""] + [f"![{name}]({path})" for name, path in figures.items()] + [""]
    return "\n".join(out + run_footer(results))


def write_report(directory: Path, results: dict) -> str:
    test = results["splits"]["test"]
    figures = {"Exact accuracy by range": _figure_per_range(directory, test),
               "Mean expert weight by true range": figure_weights(directory, test)}
    text = render_report(results, figures)
    write_text(directory / "report.md", text)
    return text
