"""The markdown report of a digits run: overall and per-domain tables of every composition that
ran, router reliability and wall time per stage; written to report.md and printed at the end."""

from redkit.report import markdown_table, run_footer
from redkit_experiments.digits.data import DIGIT_PAIRS


def _f(x: float) -> str:
    return f"{x:.4f}"


def render_report(results: dict) -> str:
    test = results["splits"]["test"]
    counts = {name: split["count"] for name, split in results["data"]["splits"].items()}
    out = [
        f"# digits: 5 label-pair domains ({results['data']['source']['name']}, seed {results['seed']}, --run {results['run']})",
        "",
        "Splits: "
        + ", ".join(f"{name} {n}" for name, n in counts.items())
        + ". Domains: "
        + ", ".join(f"{name} = {{{a}, {b}}}" for name, (a, b) in results["data"]["domains"].items())
        + ".",
        "",
    ]
    out += [
        "## Overall (test)",
        "",
        markdown_table(
            ["Composition", "Accuracy", "Macro-F1", "Weighted F1", "Pair accuracy"],
            [
                [
                    name,
                    _f(m["overall"]["accuracy"]),
                    _f(m["overall"]["macro_f1"]),
                    _f(m["overall"]["weighted_f1"]),
                    _f(m["overall"]["domain_accuracy"]),
                ]
                for name, m in test.items()
            ],
        ),
        "",
        "Pair accuracy: the predicted digit is at least in the true digit's pair.",
        "",
    ]
    out += [
        "## Accuracy per domain (test)",
        "",
        markdown_table(
            ["Composition", *DIGIT_PAIRS.domains],
            [
                [
                    name,
                    *(_f(m["per_domain"][d]["accuracy"]) if d in m["per_domain"] else "-" for d in DIGIT_PAIRS.domains),
                ]
                for name, m in test.items()
            ],
        ),
        "",
    ]
    routers = [kind for kind in ("router", "gate") if results.get(kind)]
    if routers:
        header = ["Split"] + [f"{'RED router' if kind == 'router' else 'MoE gate top-1'} = pair" for kind in routers]
        out += [
            "## Routing accuracy",
            "",
            markdown_table(
                header,
                [[split, *(_f(results[kind][split]["accuracy"]) for kind in routers)] for split in results[routers[0]]],
            ),
            "",
        ]
    return "\n".join(out + run_footer(results))
