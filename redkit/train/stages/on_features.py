"""Training one small module (an expert, a head, a router) on a run's cached features, and what such modules
read: the run's classifier C, one domain's rows."""

from collections.abc import Callable

import torch
from torch import nn

from redkit.modules.labels import joined_classifier
from redkit.modules.store import install_module, load_module, module_exists, retrain_dir, save_module
from redkit.threads import one_thread
from redkit.train.loop import Checkpoint, fit
from redkit.train.stage_run import StageRun
from redkit.train.stages.registry import module_meta


def train_on_features(
    run: StageRun,
    stage: str,
    directory,
    module: nn.Module,
    loss_fn: Callable,
    train: tuple[torch.Tensor, ...],
    val: tuple[torch.Tensor, ...],
    kind: str,
    domain: int | None,
    seed_offset: int,
    precision: str = "fp32",
    retrain: bool = False,
) -> dict:
    """Fit `module` on cached features; `loss_fn(module, *tensors)` is a mean loss. `precision` bf16
    computes the losses under bf16 autocast (weights, optimizer and saved module stay fp32). A module
    that exists is kept, unless `retrain`: it is then trained again beside the old one, which the new
    one replaces once it is saved (an interrupted retraining leaves the old module in place)."""
    if module_exists(directory) and not retrain:
        return {"skipped": str(directory)}
    target = directory
    if module_exists(target):  # trained again beside it (checkpoints too); installed over it once saved
        directory = retrain_dir(target)
    module.to(run.device)
    train = tuple(t.to(run.device) for t in train)
    val = tuple(t.to(run.device) for t in val)
    monitor = run.monitor
    on_step = (lambda step, model: monitor(stage, step, model)) if monitor else None

    def in_precision(*tensors: torch.Tensor) -> torch.Tensor:
        if precision == "fp32":
            return loss_fn(module, *tensors)
        with torch.autocast(device_type=run.device.type, dtype=torch.bfloat16):
            return loss_fn(module, *tensors).float()

    with one_thread():  # small modules: thread hand-offs cost more than their arithmetic
        result = fit(
            module,
            lambda idx: in_precision(*(t[idx] for t in train)),
            len(train[0]),
            lambda: in_precision(*val).item(),
            run.config.train_config(stage),
            seed=run.config.seed + seed_offset,
            checkpoint_dir=directory,
            desc=f"{stage} {target.name}",
            log=run.log,
            on_step=on_step,
        )
    save_module(directory, module.cpu(), module_meta(run, module, kind, domain, result, precision))
    Checkpoint(directory).remove()
    retrained = directory != target
    if retrained:
        install_module(directory, target)
    return {"module": str(target), "epochs": result.epochs, "best_val_loss": result.best_val_loss} | (
        {"retrained": True} if retrained else {}
    )


def load_classifier(run: StageRun) -> nn.Module:
    """C, joined with the label rows of domains added with new labels (redkit/modules/labels.py)."""
    return joined_classifier(
        run, lambda *parts: load_module(run.module_dir(*parts), run.fingerprint, run.feature_dim)[0].to(run.device)
    )


def domain_rows(labels: torch.Tensor, domain: int) -> torch.Tensor:
    """(n,) the indices of the rows whose domain (labels (N,)) is `domain`."""
    return (labels == domain).nonzero(as_tuple=True)[0]
