"""`<run>/analysis/routing/`: results.json (with provenance), report.md (the routing-quality protocol's tables) and
figures/*.png; the run's report.html is rebuilt to include it (redkit.report_html)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from redkit.atomic import write_json, write_text  # noqa: E402
from redkit.provenance import provenance  # noqa: E402
from redkit.report import markdown_table, run_footer, save_figure  # noqa: E402
from redkit.report_html import write_html_report  # noqa: E402

ROLE_NAMES = {"router": "RED router", "gate": "MoE gate"}
DYNAMICS = ("entropy", "cv", "max_vio")


def _f(x, digits: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def metrics_table(result: dict) -> tuple[list[str], list[list[str]]]:
    header = [
        "router",
        "role",
        "k",
        "accuracy",
        "CV",
        "MaxVio",
        "MaxVio/batch",
        "Gini",
        "unused",
        "over cap",
        "entropy",
        "top-1 w",
        "margin",
        "z-loss",
        "routed acc",
        "purity",
        "NMI",
        "Jaccard",
        "active",
    ]
    rows = []
    for name, r in result["metrics"]["routers"].items():
        for role, m in r["roles"].items():
            rows.append(
                [
                    name,
                    ROLE_NAMES[role],
                    str(m["k"]),
                    _f(m["accuracy"]),
                    _f(m["cv"]),
                    _f(m["max_vio"]),
                    _f(m["max_vio_batch_mean"]),
                    _f(m["gini"]),
                    _f(m["unused_rate"], 2),
                    _f(m["over_capacity"]),
                    _f(m["entropy"]),
                    _f(m["top1_weight"]),
                    _f(m["margin"]),
                    _f(m.get("z_loss"), 2),
                    _f(m["routed_accuracy"]),
                    _f(m["purity"]),
                    _f(m["nmi"]),
                    _f(m["jaccard_mean"]),
                    _f(m["active_experts"], 2),
                ]
            )
    return header, rows


def _mcnemar(m: dict) -> str:
    test = m["vs_reference"]
    return f"{test['only_a']} / {test['only_b']}, p = {test['p']:.3g}"


def accuracy_table(result: dict) -> tuple[list[str], list[list[str]]]:
    roles = result["roles"]
    reference = next(iter(result["metrics"]["routers"].values()))["roles"][roles[0]]["vs_reference"]["reference"]
    header = ["router"]
    for role in roles:
        what = "RED" if role == "router" else "MoE"
        header += [f"{what} accuracy", f"{what}: only this / only {reference} right (McNemar)"]
    header.append("train seconds (all roles)")
    rows = [
        [name]
        + [cell for role in roles for cell in (_f(r["roles"][role]["accuracy"]), _mcnemar(r["roles"][role]))]
        + [f"{r['train_seconds']:.1f}"]
        for name, r in result["metrics"]["routers"].items()
    ]
    return header, rows


def stability_table(result: dict) -> tuple[list[str], list[list[str]]]:
    header = ["router", "seeds", "RED accuracy mean ± sd", "agreement", "saturation", "Kendall τ (usage ranks)"]
    rows = []
    for name, s in result["stability"].items():
        if s.get("deterministic"):
            rows.append([name, "—", "training-free: the same router for every seed", "1", "1", "1"])
            continue
        acc = s["accuracy"]
        rows.append(
            [
                name,
                ", ".join(map(str, s["seeds"])),
                f"{acc['mean']:.4f} ± {acc['sd']:.4f}",
                _f(s["agreement"]),
                _f(s["saturation"]),
                _f(s["kendall_tau"]),
            ]
        )
    return header, rows


def scaling_table(result: dict) -> tuple[list[str], list[list[str]]]:
    header = ["K", "router", "RED acc", "MoE acc", "CV", "MaxVio", "entropy", "routed acc", "NMI", "train s"]
    rows = []
    for k, part in result["scaling"].items():
        if "skipped" in part:
            rows.append([k, part["skipped"]] + [""] * 8)
            continue
        for name, r in part["routers"].items():
            red, moe = r["roles"]["router"], r["roles"].get("gate")
            rows.append(
                [
                    k,
                    name,
                    _f(red["accuracy"]),
                    _f(moe["accuracy"]) if moe else "n/a",
                    _f(red["cv"]),
                    _f(red["max_vio"]),
                    _f(red["entropy"]),
                    _f(red["routed_accuracy"]),
                    _f(red["nmi"]),
                    f"{r['train_seconds']:.1f}",
                ]
            )
    return header, rows


def overhead_table(result: dict) -> tuple[list[str], list[list[str]]]:
    header = ["router", "component", "ms per batch (median)", "FLOPs per example", "FLOPs if dispatched sparsely"]
    rows = []
    for name, o in result["overhead"].items():
        for component, c in o["components"].items():
            rows.append(
                [
                    name,
                    component,
                    f"{c['ms']:.3f}",
                    f"{c['flops_per_example']:,.0f}",
                    f"{c['dispatched_flops_per_example']:,.0f}" if "dispatched_flops_per_example" in c else "",
                ]
            )
    return header, rows


def _router_grid(n: int, height: float):
    """One panel per router, 4 to a row; the panels left over are hidden."""
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, height * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, axes


def usage_figure(path: Path, result: dict) -> str:
    routers = result["metrics"]["routers"]
    fig, axes = _router_grid(len(routers), 2.6)
    for ax, (name, r) in zip(axes.flat, routers.items()):
        for offset, (role, m) in enumerate(r["roles"].items()):
            load = np.asarray(m["load_topk"], dtype=float)
            ax.bar(np.arange(len(load)) + 0.4 * offset, load / load.sum(), 0.4, label=ROLE_NAMES[role])
        ax.axhline(1 / len(load), color="k", linestyle=":", linewidth=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("expert", fontsize=8)
    axes.flat[0].set_ylabel("share of assignments")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"Expert usage ({result['split']} split; dotted: perfect balance)")
    return save_figure(fig, path)


def affinity_figure(path: Path, result: dict) -> str:
    routers = result["metrics"]["routers"]
    fig, axes = _router_grid(len(routers), 2.9)
    for ax, (name, r) in zip(axes.flat, routers.items()):
        image = ax.imshow(np.asarray(r["roles"]["router"]["affinity"]), vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"{name}: P(expert | domain)", fontsize=9)
        ax.set_xlabel("expert", fontsize=8)
        ax.set_ylabel("domain", fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.046)
    return save_figure(fig, path)


def dynamics_figure(path: Path, result: dict, role: str) -> str | None:
    routers = {
        name: [row for row in r["dynamics"] if row["stage"] == role] for name, r in result["metrics"]["routers"].items()
    }
    if not any(routers.values()):
        return None
    fig, axes = plt.subplots(1, len(DYNAMICS), figsize=(4.2 * len(DYNAMICS), 3.4))
    for ax, key in zip(axes, DYNAMICS):
        for name, rows in routers.items():
            if rows:
                ax.plot([row["step"] for row in rows], [row[key] for row in rows], label=name)
        ax.set_xlabel("optimizer step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{ROLE_NAMES[role]} while it trains (validation sample)")
    return save_figure(fig, path)


def gram_figure(path: Path, result: dict) -> str:
    experts = result["metrics"]["experts"]
    fig, axes = plt.subplots(1, len(experts), figsize=(3.8 * len(experts), 3.3), squeeze=False)
    labels = {"router": "residual experts (B A)", "gate": "full heads (W)"}
    for ax, (role, g) in zip(axes[0], experts.items()):
        image = ax.imshow(np.asarray(g["matrix"]), vmin=-1, vmax=1, cmap="coolwarm")
        ax.set_title(f"Gram: {labels[role]}", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    return save_figure(fig, path)


def scaling_figure(path: Path, result: dict) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    parts = {int(k): p for k, p in result["scaling"].items() if "routers" in p}
    names = next(iter(parts.values()))["routers"].keys()
    for name in names:
        ks = sorted(parts)
        axes[0].plot(ks, [parts[k]["routers"][name]["roles"]["router"]["accuracy"] for k in ks], marker="o", label=name)
        axes[1].plot(ks, [parts[k]["routers"][name]["roles"]["router"]["cv"] for k in ks], marker="o", label=name)
    for ax, what in zip(axes, ("RED accuracy", "CV of the load")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("K experts")
        ax.set_title(what)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)


def _training_line(config: dict) -> str:
    examples = (
        f"a fixed random {config['train_examples']:,} examples of train"
        if config.get("train_examples")
        else "all of train"
    )
    epochs = f"at most {config['max_epochs']} epochs" if config.get("max_epochs") else "the stages' own epoch caps"
    return (
        f"Every router, gate and scaling expert here was trained on {examples}, {epochs} "
        "(`--train-examples`, `--max-epochs`; 0 = no cap); the run's own router is the full-data reference."
    )


def routing_report(directory: Path, result: dict) -> str:
    figures = directory / "figures"
    lines = [
        f"# Routing analysis — {len(result['routers'])} routers, {result['experts']} experts, "
        f"{result['split']} split ({result['n']} examples)",
        "",
        "Metrics as defined in `redkit_experiments/routing/metrics.py` (MaxVio without absolute value; Gini Σ(2i−n−1)x/(nΣx); "
        "entropy over the full α / log K). k: experts a decision selects; *active*: mean experts with non-zero weight; "
        "*over cap*: share of assignments beyond ⌈1.25 N k / K⌉; MaxVio/batch: mean over batches of "
        f"{result['config']['batch']}.",
        "",
        _training_line(result["config"]),
        "",
    ]
    if "metrics" in result:
        lines += [
            "## Routing metrics (primary)",
            "",
            markdown_table(*metrics_table(result)),
            "",
            f"![usage]({usage_figure(figures / 'usage.png', result)})",
            "",
            f"![affinity]({affinity_figure(figures / 'affinity.png', result)})",
            "",
            "## Accuracy with each router",
            "",
            markdown_table(*accuracy_table(result)),
            "",
        ]
        for role in result["roles"]:
            figure = dynamics_figure(figures / f"dynamics_{role}.png", result, role)
            if figure:
                lines += [f"![dynamics {role}]({figure})", ""]
        grams = ", ".join(
            f"{ROLE_NAMES[r]}'s experts {g['off_diagonal_mean_abs']:.4f}"
            for r, g in result["metrics"]["experts"].items()
        )
        lines += [
            "## Experts' Gram matrix",
            "",
            f"Mean |cosine| between two experts' flattened weight updates: {grams}.",
            "",
            f"![gram]({gram_figure(figures / 'gram.png', result)})",
            "",
        ]
    if "stability" in result:
        lines += [
            "## Stability over seeds of the router stage",
            "",
            "Mean over every pair of seeds; Kendall τ-b of the experts' usage (n/a when a usage is constant).",
            "",
            markdown_table(*stability_table(result)),
            "",
        ]
    if "scaling" in result:
        lines += [
            "## Scaling with the number of experts",
            "",
            "K equal-width parts of the answers; residual experts and heads trained for each K, then every router.",
            "",
            markdown_table(*scaling_table(result)),
            "",
        ]
        if any("routers" in p for p in result["scaling"].values()):
            lines += [f"![scaling]({scaling_figure(figures / 'scaling.png', result)})", ""]
    if "overhead" in result:
        batch = next(iter(result["overhead"].values()))["batch"] if result["overhead"] else 0
        lines += [
            "## Routing overhead (RED)",
            "",
            f"Per batch of {batch} examples on this machine; FLOPs from torch's flop counter (matrix products only).",
            "",
            markdown_table(*overhead_table(result)),
            "",
        ]
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds_per_part"].items())
    return "\n".join(lines + [f"Wall time: {parts}; total {result['seconds']:.0f} s.", ""] + run_footer(result))


def write_routing_analysis(run_dir: Path, directory: Path, result: dict) -> Path:
    result = result | {"run": str(run_dir), "provenance": provenance()}
    write_json(directory / "results.json", result)
    write_text(directory / "report.md", routing_report(directory, result))
    write_html_report(run_dir)
    return directory
