"""Training and evaluating the step decomposer (paper §4.2.7, §4.5.4; docs/guides/design.md, decisions 7, 9, 10).

    <out>/module/         config.json + model.safetensors (kind "decomposer"), loadable on its own
    <out>/metrics.json    exact-match on test and test_heldout_templates, by steps and by phrasing
    <out>/log.jsonl       one line per epoch
    <out>/cache/          number features / frozen-prefix states (safe to delete)

What it is trained on: targets.py (each number's slot and operator), splits.py (the features the head reads);
how it is scored: evaluate.py.

Two ways to use the backbone: frozen (default; the whole backbone runs once per text and the head
trains on cached number features in seconds), or `tune_top` (the frozen prefix is cached with
PrefixStates and the top layers are fine-tuned with the head, ~3 ms per example per epoch).
"""

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from redkit.atomic import write_json
from redkit.backbone import Backbone, BackboneConfig
from redkit.errors import RedkitError
from redkit.features import PrefixStates, text_hash
from redkit.modules.store import module_exists, read_meta
from redkit.provenance import provenance
from redkit.train.loop import Checkpoint, TrainConfig, fit
from redkit_experiments.arithmetic.generate import HELDOUT, DataConfig, generate
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.decomposer.evaluate import cached_programs, format_metrics, score_programs, template_styles
from redkit_experiments.decomposer.model import DecomposerHead, HeadConfig, StepDecomposer, number_positions
from redkit_experiments.decomposer.splits import Split, cached_number_features

MODULE, METRICS, LOG = "module", "metrics.json", "log.jsonl"
EVAL_SPLITS = ("test", HELDOUT)


def _default_train() -> TrainConfig:
    return TrainConfig(lr=1e-3, batch_size=64, virtual_batch_size=64, max_epochs=40, patience=3)


@dataclass
class DecomposerConfig:
    task: str = "decomposer"  # or "decomposer_times" (with * steps)
    n: int = 80_000  # train + val + test, as the paper's 80k
    seed: int = 0
    split: str = "structure"
    max_train: int | None = None  # train on the first max_train training examples (None: all 64k)
    max_val: int | None = None
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    tune_top: bool = False  # fine-tune the backbone's top layers (backbone.trainable_layers) with the head
    top_lr: float = 3e-5  # their learning rate; the head uses train.lr
    hidden: int = 256
    width: int = 128
    dropout: float = 0.1
    train: TrainConfig = field(default_factory=_default_train)
    encode_batch_size: int = 128
    device: str = "cpu"

    @classmethod
    def from_dict(cls, raw: dict) -> "DecomposerConfig":
        raw = dict(raw)
        raw["backbone"] = BackboneConfig(**raw.get("backbone", {}))
        raw["train"] = TrainConfig(**raw.get("train", {}))
        return cls(**raw)


def _operators(task: str) -> tuple[str, ...]:
    config = getattr(TASKS[task], "config", None)
    if config is None or not hasattr(config, "operators"):
        raise RedkitError(f"task {task!r} has no chain programs to decompose (use decomposer or decomposer_times)")
    return tuple(config.operators)


def decomposer_data(config: DecomposerConfig) -> dict[str, list[Example]]:
    """The dataset a config trains on and is evaluated on (also the programs `reproduce steps` executes)."""
    return generate(DataConfig(task=config.task, n=config.n, seed=config.seed, split=config.split))


def train_decomposer(
    out_dir: str | Path,
    config: DecomposerConfig | None = None,
    print_fn: Callable[[str], None] = print,
    data: dict[str, list[Example]] | None = None,
) -> dict:
    """Generate the data (unless the caller already has `decomposer_data(config)`), train (or reuse
    the finished module in <out>/module), evaluate on test and the held-out phrasings, write
    <out>/metrics.json and return it."""
    config = config or DecomposerConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    module_dir, cache_dir = out / MODULE, out / "cache"
    device = torch.device(config.device)
    timings: dict[str, float] = {}
    wall = time.perf_counter()

    start = time.perf_counter()
    operators = _operators(config.task)
    data = data or decomposer_data(config)
    train_examples = data["train"][: config.max_train] if config.max_train else data["train"]
    val_examples = data["val"][: config.max_val] if config.max_val else data["val"]
    splits = {"train": Split(train_examples, operators, "train"), "val": Split(val_examples, operators, "val")}
    splits |= {name: Split(data[name], operators, name) for name in EVAL_SPLITS}
    timings["data"] = time.perf_counter() - start
    print_fn(
        f"[data] {config.task}: train {len(splits['train'])}, val {len(splits['val'])}, "
        f"test {len(splits['test'])}, held-out phrasings {len(splits[HELDOUT])}"
    )

    backbone = Backbone(config.backbone)
    fingerprint = backbone.fingerprint()  # of the backbone as loaded: what the module must be used with
    data_hash = text_hash([ex.question + "\0" + ex.program for ex in train_examples])
    fit_info: dict = {}
    if module_exists(module_dir):
        if (trained_on := read_meta(module_dir).data_hash) != data_hash:  # its test split could overlap its training
            raise RedkitError(
                f"{module_dir}: this decomposer was trained on other data (hash {trained_on}, "
                f"this config's is {data_hash}); use another directory"
            )
        model = StepDecomposer.load(module_dir, backbone).to(device)
        if model.operators != operators:
            raise RedkitError(
                f"{module_dir}: decomposer for operators {' '.join(model.operators)}, but task "
                f"{config.task!r} has {' '.join(operators)}; use another --out"
            )
        print_fn(f"[train] reusing {module_dir}")
    else:
        torch.manual_seed(config.seed)
        head = DecomposerHead(
            HeadConfig(
                dim=backbone.hidden_size,
                operators=operators,
                hidden=config.hidden,
                width=config.width,
                dropout=config.dropout,
            )
        )
        model = StepDecomposer(backbone, head, tuned_top=config.tune_top).to(device)
        backbone.requires_grad_(False)
        start = time.perf_counter()
        for name in ("train", "val"):
            split = splits[name]
            if config.tune_top:
                split.prefix = PrefixStates.build(
                    cache_dir, backbone, split.texts, f"decomposer-{name}", config.encode_batch_size
                )
                split.positions = number_positions(backbone, split.texts)
            else:
                split.features = cached_number_features(cache_dir, model, split.texts, name, config.encode_batch_size)
        timings["encode"] = time.perf_counter() - start
        if config.tune_top:
            backbone.top_layers.requires_grad_(True)
            trainable: nn.Module = nn.ModuleDict({"head": head, "top": backbone.top_layers})
            train_config = TrainConfig(**(asdict(config.train) | {"lr": config.top_lr, "head_lr": config.train.lr}))
        else:
            trainable, train_config = head, config.train

        def val_loss() -> float:
            total, val = 0.0, splits["val"]
            for first in range(0, len(val), 512):
                idx = torch.arange(first, min(first + 512, len(val)))
                total += val.loss(model, idx, device).item() * len(idx)
            return total / len(val)

        log_path = out / LOG

        def log(row: dict) -> None:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

        result = fit(
            trainable,
            lambda idx: splits["train"].loss(model, idx, device),
            len(splits["train"]),
            val_loss,
            train_config,
            seed=config.seed,
            checkpoint_dir=module_dir,
            desc="decomposer",
            log=log,
            head=head if config.tune_top else None,
        )
        backbone.requires_grad_(False)
        model.eval()
        timings["train"] = result.seconds
        fit_info = {
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "train_seconds": result.seconds,
        }
        print_fn(
            f"[train] {result.epochs} epochs (best {result.best_epoch}), val loss {result.best_val_loss:.5f}, "
            f"{result.seconds:.0f}s"
        )
        model.save(module_dir, fingerprint, metrics=fit_info, seed=config.seed, data_hash=data_hash)
        Checkpoint(module_dir).remove()

    start = time.perf_counter()
    styles = template_styles(config.task)
    evaluation = {}
    for name in EVAL_SPLITS:
        programs = cached_programs(cache_dir, model, splits[name], config.encode_batch_size)
        evaluation[name] = score_programs(splits[name].examples, programs, styles)
    timings["evaluate"] = time.perf_counter() - start
    timings["total"] = time.perf_counter() - wall
    metrics = {
        "task": config.task,
        "config": asdict(config),
        "module": str(module_dir),
        "backbone_fingerprint": fingerprint,
        "fit": fit_info,
        "splits": evaluation,
        "wall_seconds": timings,
        "provenance": provenance(),
    }
    write_json(out / METRICS, metrics)
    print_fn(format_metrics(metrics))
    return metrics


def reproduce_decomposer(
    out: str | Path = "runs/decomposer", config: DecomposerConfig | None = None, print_fn: Callable[[str], None] = print
) -> dict:
    """The entry point for `redkit reproduce steps` (or its own subcommand): train the step
    decomposer at the paper's scale unless <out>/module is complete, evaluate, print the tables."""
    return train_decomposer(out, config, print_fn)


def load_decomposer(path: str | Path, backbone: Backbone | None = None) -> StepDecomposer:
    """A trained decomposer from its module directory (or from the run directory that holds it)."""
    path = Path(path)
    if not module_exists(path) and module_exists(path / MODULE):
        path = path / MODULE
    return StepDecomposer.load(path, backbone)
