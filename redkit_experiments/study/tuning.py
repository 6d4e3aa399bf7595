"""`redkit study tuning`: the learning rate of the fine-tuning recipe, chosen on val.

For every (trainable layers, learning rate) of the grid, stage base of a fit run on 100 % of train
(base fraction 1.0: that training *is* the `joint` reference), everything else of the recipe fixed
(redkit/fitting/recipe.py); the best epoch is kept by val accuracy, as the recipe does. Reported per
point: val accuracy and loss of its best epoch, the epoch val loss would have kept instead, test
accuracy of the kept model (reported, never chosen on) and seconds per epoch. The point with the best
val accuracy is the choice (ties: lower val loss).

    <out>/layers-<N>-lr-<lr>/   one fit run each, stage base only (its cache/ shared by all of them)
    <out>/studies/tuning/       results.json, report.md, figures/tuning.png (val accuracy per epoch)
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from redkit.jsonfile import jsonl_objects


@dataclass
class TuningConfig:
    data_dir: str  # a fit data directory, or CLINC150's (data_format "clinc150")
    data_format: str = "files"
    layers: tuple[str, ...] = ("all",)  # trainable layers: N or "all"
    lrs: tuple[float, ...] = (5e-5, 1e-4, 2e-4)
    max_epochs: int | None = None  # None: the recipe's (settled from the data)
    seed: int = 0


def _point_dir(out: Path, layers: str, lr: float) -> Path:
    return out / f"layers-{layers}-lr-{lr:g}"


def _shared_cache(out: Path, directory: Path) -> None:
    import os

    if not (directory / "cache").exists():
        directory.mkdir(parents=True, exist_ok=True)
        (out / "cache").mkdir(parents=True, exist_ok=True)
        os.symlink((out / "cache").resolve(), directory / "cache")


@torch.no_grad()
def _accuracy(run, split: str) -> float:
    from redkit.compositions import ModuleSet

    h, classes, _ = run.split_tensors(split)
    logits = ModuleSet(run).classifier()(h.to(run.device))
    return float((logits.argmax(dim=-1).cpu() == classes).float().mean())


def train_point(out: Path, config: TuningConfig, layers: str, lr: float) -> dict:
    """Stage base at one grid point (resumed if it was interrupted; skipped if done)."""
    from redkit.api import fit_setup
    from redkit.fitting.run import FitRun
    from redkit.train.stages import STAGES

    directory = _point_dir(out, layers, lr)
    fit_config, data = fit_setup(
        config.data_dir,
        data_format=config.data_format,
        seed=config.seed,
        references=(),
        trainable_layers=int(layers) if layers.isdigit() else layers,
        max_epochs=config.max_epochs,
    )
    for stage in ("base", "joint"):
        fit_config.stage_overrides[stage]["lr"] = lr
    _shared_cache(out, directory)
    run = FitRun(directory, fit_config)
    run.prepare_data(data)
    STAGES["base"](run)
    history = [
        row
        for _, row in jsonl_objects(directory / "log.jsonl", appended=True)
        if "epoch" in row and row.get("stage") == "base"
    ]
    meta = json.loads((directory / "modules" / "classifier" / "config.json").read_text())["metrics"]
    by_loss = min(history, key=lambda row: row["val_loss"])
    return {
        "layers": layers,
        "trainable_layers": fit_config.backbone.trainable_layers,
        "lr": lr,
        "best_epoch": meta["best_epoch"],
        "epochs": meta["epochs"],
        "epoch_by_loss": by_loss["epoch"],
        "val_accuracy": max(row["val_accuracy"] for row in history if row["epoch"] == meta["best_epoch"]),
        "val_loss": meta["best_val_loss"],
        "test_accuracy": _accuracy(run, "test") if "test" in run.splits else None,
        "seconds_per_epoch": sum(row["seconds"] for row in history) / len(history),
        "history": [
            {"epoch": r["epoch"], "val_accuracy": r["val_accuracy"], "val_loss": r["val_loss"]} for r in history
        ],
        "run": str(directory),
    }


def tuning_study(out: Path, config: TuningConfig, print_fn=print) -> dict:
    start = time.perf_counter()
    points = []
    for layers in config.layers:
        for lr in config.lrs:
            points.append(train_point(Path(out), config, str(layers), lr))
            p = points[-1]
            print_fn(
                f"[tuning] layers {layers} lr {lr:g}: val {p['val_accuracy']:.4f} (epoch {p['best_epoch']}/{p['epochs']}), "
                f"{p['seconds_per_epoch']:.0f} s/epoch"
            )
    chosen = max(points, key=lambda p: (p["val_accuracy"], -p["val_loss"]))
    return {
        "study": "tuning",
        "config": vars(config) | {"layers": list(config.layers), "lrs": list(config.lrs)},
        "points": points,
        "chosen": {"layers": chosen["layers"], "lr": chosen["lr"]},
        "seconds": time.perf_counter() - start,
    }


def tuning_figure(directory: Path, result: dict) -> str:
    import matplotlib.pyplot as plt

    from redkit.report import save_figure

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for p in result["points"]:
        epochs = [r["epoch"] for r in p["history"]]
        ax.plot(
            epochs,
            [r["val_accuracy"] for r in p["history"]],
            marker="o",
            markersize=3,
            label=f"layers {p['layers']}, lr {p['lr']:g}",
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("val accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Fine-tuning recipe: val accuracy per epoch")
    return save_figure(fig, directory / "figures" / "tuning.png")


def tuning_report(directory: Path, result: dict) -> str:
    from redkit.report import markdown_table

    def f(x):
        return "–" if x is None else f"{x:.4f}"

    rows = [
        [
            p["layers"],
            f"{p['lr']:g}",
            f"{p['best_epoch']} / {p['epochs']}",
            str(p["epoch_by_loss"]),
            f(p["val_accuracy"]),
            f(p["val_loss"]),
            f(p["test_accuracy"]),
            f"{p['seconds_per_epoch']:.0f}",
        ]
        for p in result["points"]
    ]
    chosen = result["chosen"]
    figure = tuning_figure(directory, result)
    return "\n".join(
        [
            "# The fine-tuning recipe's learning rate, chosen on val",
            "",
            "Stage base on 100 % of train (the `joint` reference) at each grid point; every other setting is the "
            "recipe's (redkit/fitting/recipe.py). Test accuracy is reported, never chosen on.",
            "",
            markdown_table(
                [
                    "Trainable layers",
                    "lr",
                    "best epoch (by val acc) / run",
                    "best epoch by val loss",
                    "val accuracy",
                    "val loss",
                    "test accuracy",
                    "s / epoch",
                ],
                rows,
            ),
            "",
            f"Chosen on val: trainable layers **{chosen['layers']}**, lr **{chosen['lr']:g}**.",
            "",
            f"![val accuracy per epoch]({figure})",
            "",
            f"Study wall time: {result['seconds']:.0f} s.",
        ]
    )
