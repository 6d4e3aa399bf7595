"""<out>/report.md (and report.html): the routing-quality protocol's tables filled from the measurements, the figures,
the verdict per hypothesis, the corpus and the wall times."""

from pathlib import Path

from redkit.atomic import write_text
from redkit.report import markdown_table
from redkit_experiments.spectra.corpus import DOMAINS
from redkit_experiments.spectra.figures import write_figures
from redkit_experiments.spectra.tables import TABLE7


def _ms(stat: dict, scale: float = 1.0, digits: int = 3) -> str:
    mean, sd, n = stat["mean"] * scale, stat["sd"] * scale, stat["n"]
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if n > 1 else f"{mean:.{digits}f}"


def _p(p) -> str:
    return "—" if p is None else f"{p:.3g}"


def table_61(t: dict) -> str:
    rows = [
        [name] + [_ms(v[d]) for d in DOMAINS] + [_ms(v["loss"]), f"{2.718281828 ** v['loss']['mean']:.2f}"]
        for name, v in t["6.1"].items()
    ]
    return markdown_table(["variant"] + [f"{d} loss" for d in DOMAINS] + ["mean loss", "perplexity"], rows)


def table_62(t: dict) -> str:
    keys = (
        "cv",
        "max_vio",
        "unused_rate",
        "gini",
        "gram_ortho",
        "jaccard_mean",
        "entropy",
        "top1_weight",
        "purity",
        "nmi",
    )
    rows = [[name] + [_ms(v[k]) for k in keys] for name, v in t["6.2"].items()]
    return markdown_table(
        [
            "variant",
            "CV",
            "MaxVio",
            "unused",
            "Gini",
            "Gram mean abs cos",
            "Jaccard",
            "entropy",
            "confidence",
            "purity",
            "NMI",
        ],
        rows,
    )


def table_62_layers(t: dict) -> str:
    keys = ("cv", "max_vio", "unused_rate", "gini", "gram_ortho", "jaccard_mean", "entropy", "top1_weight")
    rows = [
        [name, str(i)] + [f"{layer[k]:.3f}" for k in keys]
        for name, layers in t["6.2_layers"].items()
        for i, layer in enumerate(layers)
    ]
    return markdown_table(
        ["variant", "layer", "CV", "MaxVio", "unused", "Gini", "Gram mean abs cos", "Jaccard", "entropy", "confidence"],
        rows,
    )


def table_purity(t: dict) -> str:
    """Per expert of the last layer: the domain it serves most (share of its tokens) — from affinity
    (each domain's held-out windows have the same number of tokens, so column shares are token shares)."""
    rows = []
    for name, layers in t["affinity"].items():
        matrix = layers[-1]  # (D, E)
        cells = []
        for e in range(len(matrix[0])):
            column = [matrix[d][e] for d in range(len(DOMAINS))]
            total = sum(column)
            best = max(range(len(DOMAINS)), key=lambda d: column[d])
            cells.append(f"{DOMAINS[best]} {column[best] / total:.0%}" if total > 0 else "unused")
        rows.append([name] + cells)
    width = max(len(r) for r in rows) - 1
    return markdown_table(
        ["variant"] + [f"e{i}" for i in range(width)], [r + [""] * (width + 1 - len(r)) for r in rows]
    )


def table_7(t: dict) -> str:
    rows = [
        [
            name,
            _ms(t["6.2"][name]["expert_entropy"]),
            _ms(t["6.2"][name]["jaccard_mean"], 100, 1) + " %",
            _ms(t["6.2"][name]["gram_ortho"], 100, 2),
            _ms(t["6.2"][name]["collapse_rate"], 100, 1) + " %",
            _ms(t["6.1"][name]["loss"]),
        ]
        for name in TABLE7
        if name in t["6.2"]
    ]
    return markdown_table(
        [
            "variant",
            "expert entropy",
            "expert overlap (Jaccard)",
            "Gram mean abs cos (×10⁻²)",
            "collapse rate",
            "held-out loss",
        ],
        rows,
    )


def table_9(overhead: dict) -> str:
    rows = [
        [name, f"{c['ms']:.3f}", f"{c['mflops']:.2f}", f"{100 * c['share']:.1f} %"]
        for name, c in overhead["components"].items()
    ]
    return markdown_table(["component", "time (ms)", "MFLOPs", "% of the block"], rows)


def table_11(t: dict) -> str:
    rows = []
    for experts, v in t["11"].items():
        top2, spectra = v.get("switch top-2"), v.get("spectra")
        rows.append(
            [
                experts,
                _ms(top2["loss"]) if top2 else "—",
                _ms(spectra["loss"]) if spectra else "—",
                _ms(spectra["expert_entropy"]) if spectra else "—",
                _ms(spectra["gram_ortho"], 100, 2) if spectra else "—",
                _ms(top2["expert_entropy"]) if top2 else "—",
                _ms(top2["gram_ortho"], 100, 2) if top2 else "—",
            ]
        )
    return markdown_table(
        [
            "E",
            "switch top-2 loss",
            "SPECTRA loss",
            "SPECTRA expert entropy",
            "SPECTRA Gram (×10⁻²)",
            "top-2 expert entropy",
            "top-2 Gram (×10⁻²)",
        ],
        rows,
    )


def table_12(t: dict) -> str:
    rows = [
        [name, _ms(v["consistency"], 1, 1), _ms(v["usage_sd"]), _ms(v["kendall_tau"]), _ms(v["seconds_per_step"], 1, 2)]
        for name, v in t["12"].items()
    ]
    return markdown_table(
        ["variant", "routing consistency (%)", "expert usage sd (σ)", "Kendall τ", "s / training step"], rows
    )


def table_replacement(t: dict) -> str:
    rows = [
        [arm, _ms(v["loss"])]
        + [_ms(v[d]) for d in DOMAINS]
        + [_ms(v[k]) for k in ("cv", "entropy", "jaccard_mean", "gram_ortho", "purity")]
        for arm, v in t["replacement"].items()
    ]
    return markdown_table(
        ["arm", "held-out loss"]
        + [f"{d} loss" for d in DOMAINS]
        + ["CV", "entropy", "Jaccard", "Gram mean abs cos", "purity"],
        rows,
    )


CLAIMS = {
    "H1": "SPECTRA's held-out loss is lower than Switch top-2's",
    "H2": "SPECTRA's expert overlap (Jaccard) and Gram mean abs cos are lower than Switch top-2's",
    "H3": "SPECTRA's routing consistency across checkpoints is higher than Switch top-2's",
    "H4": "SPECTRA's training step costs at most 10 % more than Switch top-2's",
    "H5": "removing any one SPECTRA component raises the held-out loss",
    "R": "swapping SPECTRA into the trained stock model beats continuing with the stock gate (held-out loss)",
}


def table_hypotheses(h: dict) -> str:
    rows = []
    for key, claim in CLAIMS.items():
        if key not in h:
            rows.append([key, claim, "not measured", "—", "—"])
            continue
        v = h[key]
        if key == "H4":
            r = v["step_time_ratio"]
            rows.append(
                [key, claim, v["verdict"], f"step-time ratio {r['mean']:.2f} [{r['low']:.2f}, {r['high']:.2f}]", "—"]
            )
        elif "parts" in v:
            detail = "; ".join(
                f"{part}: {p['verdict']} (Δ {p['difference']['mean']:+.4f})" for part, p in v["parts"].items()
            )
            rows.append([key, claim, v["verdict"], detail, ", ".join(_p(p["paired_t_p"]) for p in v["parts"].values())])
        else:
            rows.append(
                [
                    key,
                    claim,
                    v["verdict"],
                    f"Δ (A better > 0) {v['difference']['mean']:+.4f} "
                    f"[{v['difference']['low']:+.4f}, {v['difference']['high']:+.4f}]",
                    _p(v["paired_t_p"]),
                ]
            )
    return markdown_table(["", "claim", "verdict", "measured", "paired t p"], rows)


def render(results: dict, figures: dict[str, str]) -> str:
    t, c = results["tables"], results["config"]
    m, tr, corpus = c["model"], c["train"], results["corpus"]
    seeds = results["seeds"]
    lines = [
        "# The routing-quality protocol at token level: routers inside a tiny Mixtral (`redkit reproduce spectra`)",
        "",
        f"A Mixtral of {results['parameters']:,} parameters ({m['layers']} layers, hidden {m['hidden']}, {m['experts']} experts of "
        f"width {m['intermediate']}, top-{m['top_k']}, byte vocabulary), trained from scratch once per router variant: same seed, "
        f"same batches, {tr['steps']} steps of {tr['batch']} × {m['length']} bytes (a third per domain). Seeds: {seeds}. "
        "Held-out loss in nats per byte. Every number below is measured by this run; ± is the sd over seeds.",
        "",
        "## Corpus",
        "",
        markdown_table(
            ["domain", "source", "train bytes", "held-out bytes"],
            [
                [
                    "code",
                    f"Python stdlib `{corpus['sources']['code']['directory']}`: {len(corpus['sources']['code']['train_files'])} "
                    f"train files, {len(corpus['sources']['code']['heldout_files'])} held-out files (names in results.json)",
                    str(corpus["train_bytes"]["code"]),
                    str(corpus["heldout_bytes"]["code"]),
                ],
                [
                    "math",
                    corpus["sources"]["math"]["generator"],
                    str(corpus["train_bytes"]["math"]),
                    str(corpus["heldout_bytes"]["math"]),
                ],
                [
                    "prose",
                    f"CLINC150 queries ({corpus['sources']['prose']['splits']})",
                    str(corpus["train_bytes"]["prose"]),
                    str(corpus["heldout_bytes"]["prose"]),
                ],
            ],
        ),
        "",
        f"Tokenizer: {corpus['tokenizer']}.",
        "",
        "## Hypotheses",
        "",
        table_hypotheses(t["hypotheses"]),
        "",
        "## 6.1 Held-out loss per domain",
        "",
        table_61(t),
        "",
        "## 6.2 Routing metrics (mean over layers; held-out text, evaluation mode)",
        "",
        table_62(t),
        "",
        "Per layer:",
        "",
        table_62_layers(t),
        "",
        "### Which domain each expert serves (last layer, share of the expert's top-1 tokens)",
        "",
        table_purity(t),
        "",
        f"![affinity]({figures['affinity']})",
        "",
        "## Table 7: ablations",
        "",
        table_7(t),
        "",
        "Collapse: an expert that receives under a tenth of its even share of assignments.",
        "",
        "## Table 9: routing overhead (one MoE block, SPECTRA full, training mode)",
        "",
        table_9(results["overhead"]),
        "",
        f"Routing (the five SPECTRA components) is {100 * results['overhead']['routing_share']:.1f} % of the block's time "
        f"(batch {results['overhead']['batch']} × {results['overhead']['length']}).",
        "",
    ]
    if t["11"]:
        sweep_seconds = {e: [r.get("sweep_seconds", {}).get(e) for r in results["per_seed"]] for e in t["11"]}
        lines += [
            "## Table 11: number of experts (Switch top-2 and SPECTRA trained for each E; "
            f"seeds {[r['seed'] for r in results['per_seed'] if r['sweep']]})",
            "",
            table_11(t),
            "",
            "Wall seconds per E (per seed): "
            + "; ".join(
                f"E={e}: {', '.join(f'{v:.0f}' for v in vs if v is not None)}" for e, vs in sweep_seconds.items()
            ),
            "",
        ]
    lines += [
        "## Table 12: routing stability across checkpoints (second half of training, probe batch)",
        "",
        table_12(t),
        "",
    ]
    if t["replacement"]:
        lines += [
            f"## Router replacement (stock model trained {tr['steps']} steps, then {c['replacement_steps']} more steps each way)",
            "",
            table_replacement(t),
            "",
        ]
    lines += [
        f"## Dynamics (seed {seeds[0]})",
        "",
        f"![dynamics]({figures['dynamics']})",
        "",
        f"![usage]({figures['usage']})",
        "",
        f"![loss]({figures['loss']})",
        "",
        "## Wall times",
        "",
        markdown_table(
            ["seed", "wall seconds", "CPU seconds"],
            [
                [str(r["seed"]), f"{r['seconds']:.0f}", f"{r.get('cpu_seconds', float('nan')):.0f}"]
                for r in results["per_seed"]
            ],
        ),
        "",
        f"This call: {results['wall_seconds']['this_call']:.0f} s wall, {results['cpu_seconds_this_call']:.0f} s CPU "
        "(a seed already on disk is read, not retrained; CPU time is what the run costs on an idle machine).",
        "",
    ]
    return "\n".join(lines)


def write_spectra_report(out: Path, results: dict) -> Path:
    from redkit.report_html import write_html_report

    figures = write_figures(out, results)
    write_text(Path(out) / "report.md", render(results, figures))
    return write_html_report(out)
