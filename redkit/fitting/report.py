"""The markdown report of a fit run: Task 1's layout where it applies (overall table, per-domain
accuracy, router reliability, expert weights), with *domain accuracy* (how often a routed
composition's top expert is the example's own domain) where Task 1 has range accuracy."""

from pathlib import Path

from redkit.atomic import write_text
from redkit.report import LABELS as TASK_LABELS
from redkit.report import figure_weights, markdown_table, run_footer

LABELS = TASK_LABELS | {"oracle": "Oracle per-domain heads"}


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def render_fit_report(results: dict, domains: tuple[str, ...], figures: dict[str, str] | None = None) -> str:
    config = results["config"]
    out = [f"# fit: {config['data_dir']} (seed {results['seed']}, {len(config['labels'])} labels, {len(domains)} domains)", ""]
    out += [f"- {note}" for note in results["data"].get("notes", [])] + [""]
    added = results.get("added")
    if added:
        out += [f"Domain(s) {', '.join(added['domains'])} added to {added['parent']} (router: {added['router']}); the copied "
                f"modules are unchanged (sha256 of their weights): {added['frozen_modules_unchanged']} "
                f"({', '.join(added['frozen_modules'])})", ""]
    for split, table in results["splits"].items():
        out += [f"## Overall performance ({split})", "",
                markdown_table(["Method", "Accuracy", "Domain accuracy", "Macro-F1"],
                               [[LABELS.get(n, n), _f(m["accuracy"]), _f(m.get("domain_accuracy")), _f(m["macro_f1"])]
                                for n, m in table.items()]), ""]
        unseen = next(iter(table.values()))["unseen_labels"]
        if unseen:
            out += [f"{unseen} examples have a label never seen in training: counted as wrong.", ""]
        keys = [d for d in domains if d in next(iter(table.values()))["by_domain"]]
        out += [f"## Accuracy by domain ({split})", "",
                markdown_table(["Method", *(f"{d} (n={next(iter(table.values()))['by_domain'][d]['n']})" for d in keys)],
                               [[LABELS.get(n, n), *(_f(m["by_domain"][d]["accuracy"]) for d in keys)] for n, m in table.items()]), ""]
    out += ["## Router reliability: top-1 expert = the example's domain", "",
            markdown_table(["Split", "RED router accuracy", "Router macro-F1", "MoE gate top-1 = domain"],
                           [[s, _f(r["accuracy"]), _f(r["macro_f1"]), _f(results["gate"][s]["accuracy"])]
                            for s, r in results["router"].items()]), ""]
    if results.get("external"):
        names = list(next(iter(results["external"].values())))
        out += ["## Other evaluation sets (accuracy)", "",
                markdown_table(["Method", *results["external"]],
                               [[LABELS.get(n, n), *(_f(f[n]["accuracy"]) if n in f else "–" for f in results["external"].values())]
                                for n in names]), ""]
    if figures:
        out += ["## Figures", ""] + [f"![{name}]({path})" for name, path in figures.items()] + [""]
    return "\n".join(out + run_footer(results))


def write_fit_report(directory: Path, results: dict, domains: tuple[str, ...]) -> str:
    split = next(iter(results["splits"]))  # test, or val without a test file
    figures = {f"Mean expert weight by true domain ({split})": figure_weights(directory, results["splits"][split], domains, "domain")}
    text = render_fit_report(results, domains, figures)
    write_text(directory / "report.md", text)
    return text
