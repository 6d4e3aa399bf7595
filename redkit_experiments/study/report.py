"""Where a study's results go: `<run>/studies/<name>/` holds results.json (with provenance),
report.md and figures/*.png; `<run>/report.html` is rebuilt to include it. Nothing else of the
run is touched."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.atomic import write_json, write_text  # noqa: E402
from redkit.provenance import provenance  # noqa: E402
from redkit.report import markdown_table, run_footer, save_figure  # noqa: E402
from redkit.report_html import write_html_report  # noqa: E402
from redkit_experiments.study.ablation import PAPER  # noqa: E402
from redkit_experiments.study.noise import curve, levels_table, robustness_table  # noqa: E402
from redkit_experiments.study.noise_models import NOISE_MODELS  # noqa: E402


def study_dir(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / "studies" / name


def noise_figure(path: Path, part: dict, model: str, what: str, draws: int) -> str:
    """Accuracy vs level, one line per composition with its 95% band; each composition's oracle-α
    and uniform-α accuracy as dashed / dotted lines in the same colour."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for index, name in enumerate(part["compositions"]):
        colour = f"C{index}"
        levels, mean, low, high = curve(part, model, name)
        ax.plot(levels, mean, marker="o", color=colour, label=name)
        ax.fill_between(levels, low, high, color=colour, alpha=0.2)
        reference = part["compositions"][name]["reference"]
        ax.axhline(reference["oracle"], color=colour, linestyle="--", linewidth=0.9, label=f"{name}, oracle α")
        ax.axhline(reference["uniform"], color=colour, linestyle=":", linewidth=0.9, label=f"{name}, uniform α")
    ax.set_xlabel(f"{model} noise level {NOISE_MODELS[model].symbol}")
    ax.set_ylabel(f"accuracy ({what}, n = {part['n']})")
    ax.set_title(f"Routing noise: {model} ({draws} draws per level, 95% band)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    return save_figure(fig, path)


def _noise_part(directory: Path, part: dict, what: str, draws: int, stem: str) -> list[str]:
    lines = ["### Robustness per composition", "", markdown_table(*robustness_table(part)), ""]
    for model in next(iter(part["compositions"].values()))["models"]:
        figure = noise_figure(directory / "figures" / f"{stem}_{model}.png", part, model, what, draws)
        lines += [
            f"### {model}: `{NOISE_MODELS[model].formula}`",
            "",
            markdown_table(*levels_table(part, model)),
            "",
            f"![{model}]({figure})",
            "",
        ]
    return lines


def noise_report(directory: Path, result: dict) -> str:
    draws = result["config"]["draws"]
    lines = [
        f"# Routing noise ({draws} draws per level)",
        "",
        "Accuracy as the expert weights α are perturbed (models in `redkit_experiments/study/noise_models.py`); "
        "95% Student-t interval over the draws; *area* is the mean height of the curve over the levels "
        "(1 = never hurt). The draws are shared across compositions.",
        "",
        f"## Single predictions: {result['split']} split, {result['n']} examples",
        "",
    ]
    lines += _noise_part(directory, result, result["split"], draws, "noise")
    if "executed" in result:
        lines += [f"## Executed programs: {result['executed']['n']} gold test programs, noise at every step", ""]
        lines += _noise_part(directory, result["executed"], "executed programs", draws, "noise_executed")
    return "\n".join(lines + [f"Study time: {result['seconds']:.1f} s", ""] + run_footer(result))


def _size(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.3f}%"


def complexity_report(directory: Path, result: dict) -> str:
    batches = [str(b) for b in result["config"]["batch_sizes"]]
    big = batches[-1]
    header = (
        ["component", "parameters", "% of backbone", "FLOPs / example", "% of backbone"]
        + [f"latency b={b}: median (p95) ms" for b in batches]
        + [f"per example at b={big} (µs)", f"peak memory at b={big}"]
    )
    rows = []
    for name, row in result["components"].items():
        lat = row["latency_ms"]
        rows.append(
            [
                name,
                _size(row["parameters"]),
                _pct(row["parameters_vs_backbone"]),
                _size(row["flops_per_example"]),
                _pct(row["flops_vs_backbone"]),
            ]
            + [f"{lat[b]['median']:.3f} ({lat[b]['p95']:.3f})" for b in batches]
            + [f"{1000 * lat[big]['median'] / int(big):.1f}", f"{row['peak_memory_bytes'] / 2**20:.2f} MiB"]
        )
    lines = [
        f"# Complexity (§4.10), measured on {result['device']} with {result['torch_threads']} threads",
        "",
        "Parameters of a composition are those of the modules it loads, beyond the backbone (whose tuned top "
        "layers count as backbone); FLOPs by torch.utils.flop_counter; latency over "
        f"{result['config']['repeats']} calls after 3 warm-up calls.",
        "",
        markdown_table(header, rows),
        "",
    ]
    claims = []
    for kind in ("router", "gate"):
        if kind in result["components"]:
            share = result["components"][kind]["flops_vs_backbone"]
            claims.append(
                f"- The paper: *router cost is < 0.5% of the backbone FLOPs*. Measured {kind}: {_pct(share)} "
                f"→ **{'holds' if share is not None and share < 0.005 else 'does not hold'}**."
            )
    residual, heads = result["expert_sets"]["experts/residual"], result["expert_sets"]["heads"]
    if residual and heads:
        ratio = heads / residual
        claims.append(
            f"- The paper: *RED's experts are 1–2 orders of magnitude smaller than MoE heads*. Measured: the K "
            f"residual experts hold {_size(residual)} parameters, the K heads {_size(heads)} (heads / experts = "
            f"{ratio:.2f}×) → **{'holds' if ratio >= 10 else 'does not hold'}** here. A head's size grows with the "
            f"answer classes ({result['classes']} here; a language model's head spans its vocabulary), a "
            f"rank-r expert's does not."
        )
    lines += claims + [
        "",
        "## Parameters of every module",
        "",
        markdown_table(["module", "parameters"], [[k, f"{v:,}"] for k, v in result["module_parameters"].items()]),
        "",
    ]
    return "\n".join(lines + [f"Study time: {result['seconds']:.1f} s", ""] + run_footer(result))


def _acc(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def _line_figure(
    path: Path, xs: list, lines: dict[str, list[float]], xlabel: str, title: str, log2: bool = False
) -> str:
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for label, ys in lines.items():
        ax.plot(xs, ys, marker="o", label=label)
    if log2:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def ablation_report(directory: Path, result: dict) -> str:
    task, d = result["task"], result["feature_dim"]
    lines = [
        f"# Ablations (§4.9) — {task}, {result['config']['split']} split",
        "",
        "Each variant is trained alone on the run's cached features by the run's own stage code; the run's "
        "modules are not touched. *Paper* is §4.9's figure for the same setting, where it gives one.",
        "",
    ]
    if "rank" in result:
        paper = PAPER["rank"].get(task, {})
        rows = [
            [
                f"d/{r['divisor']} = {r['rank']}" + (" (the run's)" if r["own"] else ""),
                f"{r['parameters']:,}",
                _acc(r["scores"]["red"]["accuracy"]),
                _acc(r["scores"]["red"]["macro_f1"]),
                _acc(r["scores"]["red_oracle"]["accuracy"]),
                _acc(r["scores"]["red_uniform"]["accuracy"]),
                _acc(paper.get(r["divisor"])),
                f"{r['seconds']:.0f}",
            ]
            for r in result["rank"]
        ]
        figure = _line_figure(
            directory / "figures" / "rank.png",
            [r["rank"] for r in result["rank"]],
            {
                "RED": [r["scores"]["red"]["accuracy"] for r in result["rank"]],
                "RED, oracle α": [r["scores"]["red_oracle"]["accuracy"] for r in result["rank"]],
            },
            "expert rank r",
            f"Bottleneck rank (d = {d})",
            log2=True,
        )
        lines += [
            "## Bottleneck rank (§4.9.3)",
            "",
            markdown_table(
                [
                    "rank r",
                    "parameters (K experts)",
                    "RED acc",
                    "RED macro-F1",
                    "oracle α acc",
                    "uniform α acc",
                    "paper acc",
                    "train s",
                ],
                rows,
            ),
            "",
            f"![rank]({figure})",
            "",
        ]
    if "correction" in result:
        paper = PAPER["correction"].get(task, {})
        rows = [
            [
                r["place"],
                r["composition"],
                f"{r['parameters']:,}",
                _acc(r["accuracy"]["router"]),
                _acc(r["accuracy"]["oracle"]),
                _acc(r["accuracy"]["uniform"]),
                _acc(paper.get(r["place"])),
            ]
            for r in result["correction"]
        ]
        lines += [
            "## Where the correction lives (§4.9.1)",
            "",
            markdown_table(
                [
                    "correction",
                    "composition",
                    "parameters (K experts)",
                    "trained α acc",
                    "oracle α acc",
                    "uniform α acc",
                    "paper acc",
                ],
                rows,
            ),
            "",
        ]
    if "experts" in result:
        done = [r for r in result["experts"] if "skipped" not in r]
        names = ["red", "moe", "red_oracle", "oracle", "red_uniform", "uniform"]
        rows = [
            [
                str(r["experts"]),
                *(_acc(r["scores"][n]["accuracy"]) for n in names),
                _acc(r["router_accuracy"]),
                _acc(r["gate_accuracy"]),
                f"{sum(r['seconds'].values()):.0f}",
            ]
            for r in done
        ]
        rows += [[str(r["experts"]), r["skipped"]] + [""] * 9 for r in result["experts"] if "skipped" in r]
        figure = _line_figure(
            directory / "figures" / "experts.png",
            [r["experts"] for r in done],
            {n: [r["scores"][n]["accuracy"] for r in done] for n in ("red", "moe", "red_uniform", "uniform")},
            "number of experts K (equal-width parts)",
            "Number of experts (§4.9.2)",
            log2=True,
        )
        lines += [
            "## Number of experts (§4.9.2)",
            "",
            "The answers divided into K contiguous parts of equal width; experts, heads, router and gate retrained "
            "for each K (the paper gives no table: it reports ≈0.98–0.99 with 5 and with 2 experts).",
            "",
            markdown_table(
                [
                    "K",
                    "RED",
                    "MoE",
                    "RED oracle α",
                    "heads oracle α",
                    "RED uniform α",
                    "heads uniform α",
                    "router acc",
                    "gate acc",
                    "train s",
                ],
                rows,
            ),
            "",
            f"![experts]({figure})",
            "",
        ]
    if "base" in result:
        rows = [
            [
                f"{r['fraction']:.0%}",
                f"{r['base_examples']:,}",
                *(_acc(r["scores"][n]["accuracy"]) for n in ("base_classifier", "red", "moe", "global_head")),
                f"{r['wall_seconds']:.0f}",
            ]
            for r in result["base"]
        ]
        lines += [
            "## Base data fraction",
            "",
            "Stage base retrained on each share of train, then every later stage.",
            "",
            markdown_table(
                ["base data", "examples", "global head (base)", "RED", "MoE", "global head (100%)", "wall s"], rows
            ),
            "",
        ]
    seconds = ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items())
    return "\n".join(lines + [f"Study time: {seconds}", ""] + run_footer(result))


def _p(p: float | None) -> str:
    return "n/a" if p is None else (f"{p:.2g}" if p >= 1e-4 else "< 1e-4")


def _mcnemar(m: dict) -> str:
    """One seed's McNemar test: which side wins more of the discordant examples ("A"/"B"), and p."""
    return f"{'A' if m['only_a'] > m['only_b'] else 'B' if m['only_b'] > m['only_a'] else '='} {_p(m['p'])}"


def seeds_report(directory: Path, result: dict) -> str:
    comps = result["compositions"]
    names = sorted(comps, key=lambda n: -comps[n]["accuracy"]["mean"])
    rows = [
        [
            name,
            f"{c['accuracy']['mean']:.4f} ± {c['accuracy']['sd']:.4f}",
            f"[{c['accuracy']['low']:.4f}, {c['accuracy']['high']:.4f}]",
            f"{c['macro_f1']['mean']:.4f} [{c['macro_f1']['low']:.4f}, {c['macro_f1']['high']:.4f}]",
            " ".join(f"{a:.4f}" for a in c["accuracy"]["per_seed"]),
        ]
        for name, c in ((n, comps[n]) for n in names)
    ]
    claims = [
        [
            f"{c['a']} > {c['b']}",
            f"{c['mean_difference']:+.4f} [{c['difference']['low']:+.4f}, {c['difference']['high']:+.4f}]",
            _p(c["paired_t_p"]),
            " ".join(_mcnemar(m) for m in c["mcnemar"]),
            f"{c['seeds_significant']['a']} / {c['seeds_significant']['b']}",
            f"**{c['verdict']}**",
        ]
        for c in result["claims"]
    ]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for i, name in enumerate(names):
        acc = comps[name]["accuracy"]
        ax.errorbar(
            [i],
            [acc["mean"]],
            yerr=[[acc["mean"] - acc["low"]], [acc["high"] - acc["mean"]]],
            fmt="o",
            color="C0",
            capsize=4,
        )
        ax.scatter([i] * len(acc["per_seed"]), acc["per_seed"], s=10, color="C1", zorder=3)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{result['config']['task']}: {len(result['seeds'])} seeds (mean, 95% t-interval; dots: seeds)")
    ax.grid(alpha=0.3)
    figure = save_figure(fig, directory / "figures" / "seeds.png")
    lines = [
        f"# Seeds and significance — {result['config']['task']}, {len(result['seeds'])} seeds, "
        f"{result['n']} {result['config']['split']} examples",
        "",
        "Full replicates (every stage, stage base included) on the same data; only the training seed differs.",
        "",
        "## Accuracy and macro-F1 per composition",
        "",
        markdown_table(
            ["composition", "accuracy (mean ± sd)", "95% t-interval", "macro-F1 [95% interval]", "per seed"], rows
        ),
        "",
        f"![seeds]({figure})",
        "",
        "## The paper's orderings",
        "",
        "Paired t-test over seeds on accuracy; McNemar's exact test per seed on per-example correctness "
        "(winner: the side right on more of the examples exactly one of them gets right). "
        "*holds*: A higher with p < 0.05; *reversed*: B higher with p < 0.05; else *cannot tell*.",
        "",
        markdown_table(
            [
                "claim",
                "A − B [95% interval]",
                "paired t p",
                "McNemar per seed (winner, p)",
                "seeds A / B better at p < 0.05",
                "verdict",
            ],
            claims,
        ),
        "",
    ]
    wall = ", ".join(f"seed {k}: {v:.0f} s" for k, v in result["wall_seconds_per_seed"].items())
    total = sum(result["wall_seconds_per_seed"].values())
    return "\n".join(
        lines
        + [
            f"Wall time of each replicate's stages: {wall} (total {total:.0f} s); this call {result['seconds']:.0f} s",
            "",
        ]
        + run_footer(result)
    )


def write_study(run_dir: Path, name: str, result: dict, render) -> Path:
    """results.json (+ provenance) and report.md (from `render(directory, result)`) of a study."""
    directory = study_dir(run_dir, name)
    result = result | {"run": str(run_dir), "provenance": provenance()}
    write_json(directory / "results.json", result)
    write_text(directory / "report.md", render(directory, result))
    write_html_report(run_dir)
    return directory
