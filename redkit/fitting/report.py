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
    out = [
        f"# fit: {config['data_dir']} (seed {results['seed']}, {len(config['labels'])} labels, {len(domains)} domains)",
        "",
    ]
    out += [f"- {note}" for note in results["data"].get("notes", [])] + [""]
    added = results.get("added")
    if added:
        out += [
            f"Domain(s) {', '.join(added['domains'])} added to {added['parent']} (router: {added['router']}); the copied "
            f"modules are unchanged (sha256 of their weights): {added['frozen_modules_unchanged']} "
            f"({', '.join(added['frozen_modules'])})",
            "",
        ]
    for split, table in results["splits"].items():
        out += [
            f"## Overall performance ({split})",
            "",
            markdown_table(
                ["Method", "Accuracy", "Domain accuracy", "Macro-F1"],
                [
                    [LABELS.get(n, n), _f(m["accuracy"]), _f(m.get("domain_accuracy")), _f(m["macro_f1"])]
                    for n, m in table.items()
                ],
            ),
            "",
        ]
        unseen = next(iter(table.values()))["unseen_labels"]
        if unseen:
            out += [f"{unseen} examples have a label never seen in training: counted as wrong.", ""]
        keys = [d for d in domains if d in next(iter(table.values()))["by_domain"]]
        out += [
            f"## Accuracy by domain ({split})",
            "",
            markdown_table(
                ["Method", *(f"{d} (n={next(iter(table.values()))['by_domain'][d]['n']})" for d in keys)],
                [[LABELS.get(n, n), *(_f(m["by_domain"][d]["accuracy"]) for d in keys)] for n, m in table.items()],
            ),
            "",
        ]
    out += [
        "## Router reliability: top-1 expert = the example's domain",
        "",
        markdown_table(
            ["Split", "RED router accuracy", "Router macro-F1", "MoE gate top-1 = domain"],
            [
                [s, _f(r["accuracy"]), _f(r["macro_f1"]), _f(results["gate"][s]["accuracy"])]
                for s, r in results["router"].items()
            ],
        ),
        "",
    ]
    out += _references_section(results)
    out += _oos_section(results, config)
    if results.get("external"):
        names = list(next(iter(results["external"].values())))
        out += [
            "## Other evaluation sets (accuracy)",
            "",
            markdown_table(
                ["Method", *results["external"]],
                [
                    [LABELS.get(n, n), *(_f(f[n]["accuracy"]) if n in f else "–" for f in results["external"].values())]
                    for n in names
                ],
            ),
            "",
        ]
    if figures:
        out += ["## Figures", ""] + [f"![{name}]({path})" for name, path in figures.items()] + [""]
    return "\n".join(out + run_footer(results))


# Larson et al. 2019, Table 2 ("Full" training data): in-scope accuracy and OOS recall, in %, as
# published (their figures, not measured here), for the CLINC150 report's comparison.
LARSON_TABLE2 = (
    ("BERT (bert-large, fine-tuned), oos-threshold", 96.2, 52.3),
    ("BERT, oos-train", 96.9, 40.3),
    ("MLP on USE embeddings, oos-threshold", 93.4, 49.1),
    ("SVM, oos-train", 91.0, 14.5),
    ("Rasa", 91.5, 45.3),
    ("DialogFlow", 91.7, 14.0),
)
# The stages whose wall time is each method's training cost (RED: its base, its experts, its router).
TRAINING_STAGES = {
    "red": ("base", "experts", "router"),
    "red_per_domain": ("base", "experts", "router"),
    "global_head": ("base", "heads"),
    "moe": ("base", "heads", "gate"),
    "joint": ("joint",),
    "linear_probe": ("linear_probe",),
}


def _references_section(results: dict) -> list[str]:
    """RED beside the honest references (docs/guides/design.md, decision 12): accuracy and seconds to train."""
    split = next(iter(results["splits"]))
    table, seconds = results["splits"][split], results.get("wall_seconds_per_stage", {})
    replay_free = results["config"].get("recipe") == "replay-free"
    base_is_joint = results["config"].get("base_fraction", 0) >= 1.0 and not replay_free
    rows = []
    for name, stages in TRAINING_STAGES.items():
        if name not in table:
            continue
        if name == "joint" and base_is_joint:
            stages = ("base",)
        if replay_free and name in ("red", "red_per_domain"):  # no stage base: the owners, then the router
            stages = ("owners", "router")
        rows.append(
            [
                LABELS.get(name, name),
                _f(table[name]["accuracy"]),
                f"{sum(seconds.get(s, 0.0) for s in stages):.1f}",
                " + ".join(stages),
            ]
        )
    if not rows:
        return []
    note = " (base fraction 1.0: stage base *is* the joint model)" if base_is_joint else ""
    return [
        f"## RED against the references ({split}){note}",
        "",
        markdown_table(["Method", "Accuracy", "Train seconds", "Stages timed"], rows),
        "",
    ]


def _oos_section(results: dict, config: dict) -> list[str]:
    oos = results.get("oos")
    if not oos:
        return []
    out = [
        "## Out-of-scope queries (oos-threshold: the threshold of the best accuracy on val + oos_val, OOS as one more class)",
        "",
    ]
    if oos.get("test"):
        out += [
            markdown_table(
                ["Method", "Score", "Threshold", "In-scope accuracy", "OOS recall", "AUROC"],
                [
                    [
                        LABELS.get(n, n),
                        m["score"],
                        f"{m['threshold']:.4f}",
                        _f(m["in_scope_accuracy"]),
                        _f(m["oos_recall"]),
                        _f(m["auroc"]),
                    ]
                    for n, m in oos["test"].items()
                ],
            ),
            "",
        ]
    else:
        out += [
            markdown_table(
                ["Method", "Score", "Threshold", "Val in-scope accuracy", "Val OOS recall", "Val AUROC"],
                [
                    [
                        LABELS.get(n, n),
                        c["score"],
                        f"{c['threshold']:.4f}",
                        _f(c["val"]["in_scope_accuracy"]),
                        _f(c["val"]["oos_recall"]),
                        _f(c["val"]["auroc"]),
                    ]
                    for n, c in oos["chosen"].items()
                ],
            ),
            "",
        ]
    if config.get("data_format") == "clinc150":
        out += [
            'Larson et al. (2019), Table 2, "Full" data: their published figures, not measured here.',
            "",
            markdown_table(
                ["Their system", "In-scope accuracy", "OOS recall"],
                [[name, f"{acc / 100:.3f}", f"{rec / 100:.3f}"] for name, acc, rec in LARSON_TABLE2],
            ),
            "",
        ]
    return out


def write_fit_report(directory: Path, results: dict, domains: tuple[str, ...]) -> str:
    split = next(iter(results["splits"]))  # test, or val without a test file
    figures = {
        f"Mean expert weight by true domain ({split})": figure_weights(
            directory, results["splits"][split], domains, "domain"
        )
    }
    if results.get("oos", {}).get("curves"):
        from redkit.oos.evaluate import figure_tradeoff

        names = [
            n
            for n in ("red", "red_per_domain", "global_head", "moe", "joint", "linear_probe")
            if n in results["oos"]["curves"]
        ]
        figures["In-scope accuracy against OOS recall as the threshold moves (test)"] = figure_tradeoff(
            directory, results["oos"], names
        )
    text = render_fit_report(results, domains, figures)
    write_text(directory / "report.md", text)
    return text
