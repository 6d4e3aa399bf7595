"""What every report is made of: method names, markdown tables, figures saved as PNG, the footer
that says where the numbers came from, and the mean expert weight by true domain."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.atomic import atomic_path  # noqa: E402

LABELS = {
    "base_classifier": "Global head (base's classifier C)",
    "global_head": "Global head (100% data)",
    "oracle": "Oracle per-domain heads",
    "uniform": "Uniform avg (all_fixed)",
    "moe": "MoE gating (softmax)",
    "red": "**RED (router)**",
    "red_oracle": "RED, oracle α",
    "red_uniform": "RED, uniform α (AllFix)",
    "red_logit_experts": "RED in logit space (original code)",
    "red_per_domain": "**RED within domains** (p(y) = α_d(y) p_d(y))",
    "red_per_domain_oracle": "RED within domains, oracle α",
    "red_mixture": "RED mixing its experts' outputs (Σ α_i p_i)",
    "domain_oracle": "C alone within the true domain's labels (no expert)",
    "joint": "joint (backbone + classifier fine-tuned on 100% of train)",
    "linear_probe": "linear probe (frozen features, LR)",
}


def _f(x: float) -> str:
    return f"{x:.4f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def figure_weights(directory: Path, split_results: dict, domains: tuple[str, ...], what: str = "domain") -> str:
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
        out += [
            "## Wall time per stage (seconds)",
            "",
            markdown_table(list(times), [[f"{t:.1f}" for t in times.values()]]),
            "",
        ]
    prov = results.get("provenance", {})
    if prov:
        out += [
            f"redkit {prov.get('redkit')} · commit {prov.get('git_commit')} · "
            + ", ".join(f"{k} {v}" for k, v in prov.get("versions", {}).items()),
            "",
        ]
    return out
