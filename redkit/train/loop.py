"""The one training loop every stage uses: AdamW, micro-batches accumulated into a virtual batch,
early stopping on validation loss (or accuracy), and a checkpoint after every epoch that a rerun
resumes from.

The caller says what a micro-batch's loss is (`batch_loss(indices)`) and what validation gives
(`val_loss()`: the loss, or {"loss", "accuracy"}); the loop owns optimisation, the learning-rate
schedule, batching, stopping, checkpoints and progress. Shuffling and dropout are seeded per epoch,
so a resumed run computes exactly what an uninterrupted one would.

The defaults are the plain loop of the stages on cached features (constant learning rate, random
batches, the best epoch by val loss). A fit run's fine-tuning of the backbone (stage base, `joint`)
switches on the recipe of BERT (Devlin et al. 2019) as uncertainty-baselines runs it on CLINC150:
linear warm-up over the first 10 % of steps then linear decay to 0 (`schedule="linear"`), label
smoothing, batches of similar lengths (`length_grouped`, with the texts' `lengths`) and the best
epoch by val accuracy (`select_by="accuracy"`).
"""

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm

from redkit.atomic import atomic_path, write_json
from redkit.errors import RedkitError
from redkit.train.ranks import Ranks

SCHEDULES = ("constant", "linear")
# accuracy: the best val accuracy, ties broken by the lower val loss; last: every epoch, the last kept (a fixed
# number of epochs, no early stopping: what continual-learning protocols run per step)
SELECT_BY = ("loss", "accuracy", "last")
MEGABATCH = 50  # length_grouped: batches are cut from runs of 50 batches' worth of examples sorted by length


@dataclass
class TrainConfig:
    lr: float = 1e-4
    batch_size: int = 16  # micro-batch
    virtual_batch_size: int = 64  # gradients of virtual/micro micro-batches are accumulated per step
    max_epochs: int = 60
    patience: int = 3  # epochs without a better validation loss before stopping
    weight_decay: float = 0.01
    head_lr: float | None = None  # a separate rate for parameters the stage marks as a fresh head
    min_delta: float = 1e-4  # a validation loss must beat the best by this much to count
    schedule: str = "constant"  # SCHEDULES: "linear" = warm-up, then linear decay to 0 at the last step
    warmup_ratio: float = (
        0.0  # of all steps (max_epochs x steps per epoch), with the rate rising from 0 (schedule "linear")
    )
    label_smoothing: float = 0.0  # of the training loss, where the stage's loss reads it (stage base, joint)
    select_by: str = "loss"  # SELECT_BY: which validation figure picks the best epoch and stops early
    length_grouped: bool = False  # batches of texts of similar lengths (less padding), where the stage gives lengths

    def __post_init__(self):
        for name, value, allowed in (("schedule", self.schedule, SCHEDULES), ("select_by", self.select_by, SELECT_BY)):
            if value not in allowed:
                raise RedkitError(f"training setting {name} = {value!r} is not one of {', '.join(allowed)}")


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """The multiplier of the base learning rate at optimizer step `step` (0-based) of `total`:
    transformers' get_linear_schedule_with_warmup for "linear" (0 at step 0, 1 after `warmup`
    steps, 0 again at `total`), 1 for "constant"."""
    if schedule == "constant":
        return 1.0
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def epoch_batches(order: torch.Tensor, batch_size: int, lengths: torch.Tensor | None = None) -> list[torch.Tensor]:
    """An epoch's batches of indices, from a random `order` (N,). With `lengths` (N,) batches are of
    texts of similar lengths, as transformers' LengthGroupedSampler makes them: the order is cut into
    runs of MEGABATCH batches, each run sorted by length and cut into batches, and the batches are
    shuffled (the global torch generator: the epoch's seed). The count of batches is the same."""
    if lengths is None:
        return list(order.split(batch_size))
    runs = order.split(batch_size * MEGABATCH)
    batches = [batch for run in runs for batch in run[torch.argsort(lengths[run], stable=True)].split(batch_size)]
    return [batches[i] for i in torch.randperm(len(batches)).tolist()]


def _val_figures(value) -> dict[str, float]:
    """What `val_loss()` returned, as {"loss"[, "accuracy"]}."""
    return {k: float(v) for k, v in value.items()} if isinstance(value, dict) else {"loss": float(value)}


def _improves(figures: dict[str, float], progress: dict, config: TrainConfig) -> bool:
    """Is this epoch's validation better than the best so far (by loss, or by accuracy then loss)?"""
    if config.select_by == "last":
        return True
    better_loss = figures["loss"] < progress["best_val_loss"] - config.min_delta
    if config.select_by == "loss":
        return better_loss
    best = progress.get("best_val_accuracy", -math.inf)
    return figures["accuracy"] > best or (figures["accuracy"] == best and better_loss)


@dataclass
class FitResult:
    epochs: int
    best_epoch: int
    best_val_loss: float
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0  # epochs already done when this call started
    best_val_accuracy: float | None = None  # where validation gives an accuracy


class Checkpoint:
    """`checkpoint.safetensors`: model, best and optimizer tensors, with the rest (epoch, best loss,
    history, optimizer settings) as JSON in its metadata, so that one atomic rename replaces the
    whole checkpoint: a kill between two files could otherwise pair one epoch's weights with the
    previous epoch's progress, and the resumed run would redo an epoch on already-updated weights.
    `checkpoint.json` repeats the progress for people and tools to read; loading ignores it."""

    def __init__(self, directory: Path):
        self.tensors = directory / "checkpoint.safetensors"
        self.state = directory / "checkpoint.json"

    def exists(self) -> bool:
        return self.tensors.is_file()

    def save(self, model: nn.Module, best: dict, optimizer: torch.optim.Optimizer, progress: dict) -> None:
        opt = optimizer.state_dict()
        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        tensors |= {f"best.{k}": v for k, v in best.items()}
        for index, slots in opt["state"].items():
            tensors |= {f"optim.{index}.{name}": t for name, t in slots.items()}
        state = progress | {"param_groups": opt["param_groups"]}
        with atomic_path(self.tensors) as tmp:
            save_file(
                {k: v.detach().contiguous().cpu() for k, v in tensors.items()},
                str(tmp),
                metadata={"progress": json.dumps(state)},
            )
        write_json(self.state, state)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        tensors = load_file(str(self.tensors))
        with safe_open(str(self.tensors), "pt") as f:
            inside = (f.metadata() or {}).get("progress")
        # A checkpoint written before the progress moved inside has it in checkpoint.json only.
        progress = json.loads(inside if inside is not None else self.state.read_text())
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")}
        state: dict[int, dict] = {}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": progress.pop("param_groups")})
        return best, progress

    def remove(self) -> None:
        self.tensors.unlink(missing_ok=True)
        self.state.unlink(missing_ok=True)


def fit(
    model: nn.Module,
    batch_loss: Callable[[torch.Tensor], torch.Tensor],
    num_train: int,
    val_loss: Callable[[], float],
    config: TrainConfig,
    seed: int,
    checkpoint_dir: Path | None = None,
    desc: str = "train",
    log: Callable[[dict], None] | None = None,
    head: nn.Module | None = None,
    on_step: Callable[[int, nn.Module], None] | None = None,
    ranks: Ranks = Ranks(),
    lengths: torch.Tensor | None = None,
) -> FitResult:
    """Train the parameters of `model` that require grad; on return `model` holds its best state.

    `on_step(step, model)` is called after every optimizer step (step counts from 1 over the whole
    fit: epoch x steps per epoch + step in epoch), e.g. to monitor a router while it trains; it
    must leave the model's mode and random state as it found them.

    `ranks`: this process's place among N data-parallel ones (redkit/train/distributed.py): each
    global batch is sliced across them, gradients are summed over them before every step, and only
    rank 0 writes the checkpoint and the log.

    `head`, a fresh sub-module of `model` (e.g. a new classifier on a pretrained body), gets
    `config.head_lr` when that is set: pretrained weights want small steps, a new head larger ones.

    `lengths` (num_train,): each example's length, for `config.length_grouped` batches."""
    head_ids = {id(p) for p in head.parameters()} if head is not None and config.head_lr else set()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if id(p) not in head_ids], "lr": config.lr}]
    if head_ids:
        groups.append({"params": [p for p in params if id(p) in head_ids], "lr": config.head_lr})
    optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
    base_lrs = [group["lr"] for group in groups]
    accumulate = max(1, config.virtual_batch_size // config.batch_size)
    checkpoint = Checkpoint(checkpoint_dir) if checkpoint_dir else None
    log = log if ranks.is_writer else None
    best_state = copy.deepcopy(model.state_dict())
    progress = {"epoch": 0, "best_epoch": 0, "best_val_loss": math.inf, "bad_epochs": 0, "history": [], "seconds": 0.0}
    if checkpoint and checkpoint.exists():
        best_state, progress = checkpoint.load(model, optimizer)
    resumed_from = progress["epoch"]
    steps_per_epoch = math.ceil(math.ceil(num_train / config.batch_size) / accumulate)
    total_steps = steps_per_epoch * config.max_epochs
    warmup_steps = round(config.warmup_ratio * total_steps)
    grouped = lengths if config.length_grouped else None
    bar = tqdm(
        total=config.max_epochs,
        initial=resumed_from,
        desc=desc,
        unit="epoch",
        leave=False,
        dynamic_ncols=True,
        disable=not ranks.is_writer,
    )
    while progress["epoch"] < config.max_epochs and progress["bad_epochs"] < config.patience:
        start = time.perf_counter()
        epoch = progress["epoch"]
        torch.manual_seed(seed * 100_003 + epoch)  # shuffling and dropout of this epoch
        model.train()
        batch_list = epoch_batches(torch.randperm(num_train), config.batch_size, grouped)
        if ranks.rank:  # the same order everywhere, but each rank its own dropout masks
            torch.manual_seed((seed * 100_003 + epoch) * 1_009 + ranks.rank)
        total, batches = 0.0, 0
        optimizer.zero_grad(set_to_none=True)
        step = epoch * steps_per_epoch
        for i, batch in enumerate(batch_list):
            local, weight = ranks.shard(batch)
            if len(local):
                loss = batch_loss(local)
                ((loss if weight == 1.0 else loss * weight) / accumulate).backward()
                total += loss.item() * weight  # summed over the ranks: the global batch's mean
            batches += 1
            if (i + 1) % accumulate == 0 or i + 1 == len(batch_list):
                ranks.reduce_gradients(params)
                if config.schedule != "constant":
                    factor = lr_factor(step, total_steps, warmup_steps, config.schedule)
                    for group, base in zip(optimizer.param_groups, base_lrs):
                        group["lr"] = base * factor
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                if on_step:
                    on_step(step, model)
        model.eval()
        with torch.no_grad():  # rank 0 decides: every rank stops at the same epoch
            figures = {k: ranks.agree(v) for k, v in _val_figures(val_loss()).items()}
        val = figures["loss"]
        total = ranks.sum([total])[0]
        row = {
            "stage": desc,
            "epoch": epoch + 1,
            "train_loss": total / max(batches, 1),
            "val_loss": val,
            "seconds": time.perf_counter() - start,
        }
        if "accuracy" in figures:
            row["val_accuracy"] = figures["accuracy"]
        progress["history"].append(row)
        progress["seconds"] += row["seconds"]
        progress["epoch"] = epoch + 1
        if _improves(figures, progress, config):
            progress |= {"best_val_loss": val, "best_epoch": epoch + 1, "bad_epochs": 0}
            if "accuracy" in figures:
                progress["best_val_accuracy"] = figures["accuracy"]
            best_state = copy.deepcopy(model.state_dict())
        else:
            progress["bad_epochs"] += 1
        if checkpoint and ranks.is_writer:
            checkpoint.save(model, best_state, optimizer, progress)
        if log:
            log(row)
        bar.update(1)
        bar.set_postfix(
            train=f"{row['train_loss']:.4f}",
            val=f"{val:.4f}",
            **({"acc": f"{figures['accuracy']:.4f}"} if "accuracy" in figures else {}),
        )
    bar.close()
    model.load_state_dict(best_state)
    return FitResult(
        epochs=progress["epoch"],
        best_epoch=progress["best_epoch"],
        best_val_loss=progress["best_val_loss"],
        history=progress["history"],
        seconds=progress["seconds"],
        resumed_from=resumed_from,
        best_val_accuracy=progress.get("best_val_accuracy"),
    )
