"""The experiment's figures (PNG, matplotlib), from seed `seeds[0]`'s logs:

dynamics.png   routing entropy and CV of the probe against the step, mean over layers (Fig. 5)
usage.png      expert usage over training, stacked, last MoE layer, per variant (Fig. 4)
loss.png       training loss against the step, smoothed, per variant (Fig. 3)
affinity.png   domain x expert affinity on held-out text, last MoE layer (6.2 heatmaps)
"""

from pathlib import Path

import numpy as np

from redkit_experiments.spectra.corpus import DOMAINS

USAGE_VARIANTS = ("stock (dense top-2)", "switch top-2", "spectra", "spectra -speciality", "spectra -ortho")
AFFINITY_VARIANTS = ("stock (dense top-2)", "switch top-2", "expert choice", "spectra")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def dynamics_figure(seed: dict, path: Path) -> str:
    from redkit.report import save_figure

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, row in seed["variants"].items():
        style = "--" if name.startswith("spectra ") else "-"  # ablations dashed
        for ax, key in zip(axes, ("entropy", "cv")):
            ax.plot(
                [r["step"] for r in row["routing_log"]],
                [r["mean"][key] for r in row["routing_log"]],
                style,
                label=name,
                linewidth=2.2 if name == "spectra" else 1.1,
            )
    for ax, title in zip(axes, ("routing entropy (normalised, probe)", "CV of expert load (probe)")):
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=6.5, ncol=2)
    return save_figure(fig, path)


def usage_figure(seed: dict, path: Path) -> str:
    from redkit.report import save_figure

    plt = _plt()
    names = [n for n in USAGE_VARIANTS if n in seed["variants"]]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        log = seed["variants"][name]["routing_log"]
        loads = np.array([r["load_topk"][-1] for r in log], dtype=float)  # (checkpoints, E) last layer
        shares = loads / loads.sum(axis=1, keepdims=True)
        ax.stackplot([r["step"] for r in log], shares.T, labels=[f"e{i}" for i in range(shares.shape[1])])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("share of assignments")
    axes[0][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1, 0.5))
    return save_figure(fig, path)


def loss_figure(seed: dict, path: Path, window: int = 10) -> str:
    from redkit.report import save_figure

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, row in seed["variants"].items():
        loss = np.array(row["train_loss"])
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid") if len(loss) >= window else loss
        ax.plot(
            np.arange(len(smooth)) + (len(loss) - len(smooth)) + 1,
            smooth,
            label=name,
            linewidth=2.2 if name == "spectra" else 1,
        )
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (nats/byte, mean of {window})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, ncol=2)
    return save_figure(fig, path)


def affinity_figure(tables: dict, path: Path) -> str:
    from redkit.report import save_figure

    plt = _plt()
    names = [n for n in AFFINITY_VARIANTS if n in tables["affinity"]]
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names), 2.4), squeeze=False)
    top = max(
        max(max(row) for row in tables["affinity"][name][-1]) for name in names
    )  # one colour scale for all panels
    for ax, name in zip(axes[0], names):
        matrix = np.array(tables["affinity"][name][-1])  # (D, E) last layer
        ax.imshow(matrix, vmin=0, vmax=max(top, 1e-9), cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(DOMAINS)), DOMAINS)
        ax.set_xticks(range(matrix.shape[1]), [str(i) for i in range(matrix.shape[1])], fontsize=7)
        ax.set_xlabel("expert (top-1)")
        ax.set_title(name, fontsize=9)
    fig.colorbar(axes[0][-1].images[0], ax=axes[0][-1], label="share of the domain's tokens")
    return save_figure(fig, path)


def write_figures(out: Path, results: dict) -> dict[str, str]:
    seed = results["per_seed"][0]
    figures = Path(out) / "figures"
    return {
        "dynamics": dynamics_figure(seed, figures / "dynamics.png"),
        "usage": usage_figure(seed, figures / "usage.png"),
        "loss": loss_figure(seed, figures / "loss.png"),
        "affinity": affinity_figure(results["tables"], figures / "affinity.png"),
    }
