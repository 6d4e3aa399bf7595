"""Training a LoRA expert alone: its own domain's examples only, through the frozen classifier C,
from the frozen-prefix cache (the lower layers run once per distinct text, never per epoch).

    loss_i = CE(C(pool(top_layers + LoRA_i (prefix states))), answer class)     only LoRA_i's A, B train
"""

import random
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from redkit.features import PrefixStates
from redkit.modules.store import ModuleMeta
from redkit.train.loop import Checkpoint, fit
from redkit.train.stages import fit_metrics
from redkit_experiments.peers.lora import LoraBackbone, LoraExpertConfig


def domain_sample(run, split: str, domain: int, cap: int, seed: int) -> list[int]:
    """Indices into `split` of domain `domain`: all of them, or a seeded sample of `cap`, in order."""
    rows = [i for i, ex in enumerate(run.splits[split]) if run.domain_label(ex) == domain]
    if cap and len(rows) > cap:
        rows = sorted(random.Random(seed).sample(rows, cap))
    return rows


def prefix_states(run, lb: LoraBackbone, split: str, rows: list[int], name: str) -> tuple[PrefixStates, torch.Tensor]:
    examples = [run.splits[split][i] for i in rows]
    return PrefixStates.build(run.cache_dir, lb.backbone, [ex.question for ex in examples], name), run.classes(examples)


def train_lora_expert(
    run, lb: LoraBackbone, classifier: nn.Module, domain: int, root: Path, config: LoraExpertConfig
) -> ModuleMeta:
    """Add adapter `<domain name>` to `lb`, train it alone on its domain, save it under `root/<name>/`."""
    name = run.space.domains[domain]
    seed = run.config.seed * 1000 + 500 + domain
    train_rows = domain_sample(run, "train", domain, config.examples, seed)
    val_rows = domain_sample(run, "val", domain, config.val_examples, seed + 1)
    train_states, train_y = prefix_states(run, lb, "train", train_rows, f"peers-train-{name}")
    val_states, val_y = prefix_states(run, lb, "val", val_rows, f"peers-val-{name}")
    device = run.device
    torch.manual_seed(seed)  # A's initialisation
    lb.add(name, config)
    classifier = classifier.requires_grad_(False).eval()
    trainable = nn.ModuleDict({"top": lb.backbone.top_layers})  # train()/eval() and checkpoints: the top only

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(classifier(lb.features(train_states.batch(idx, device))), train_y[idx].to(device))

    def val_loss() -> float:
        total = 0.0
        for first in range(0, len(val_rows), 512):
            idx = torch.arange(first, min(first + 512, len(val_rows)))
            logits = classifier(lb.features(val_states.batch(idx, device)))
            total += F.cross_entropy(logits, val_y[idx].to(device), reduction="sum").item()
        return total / max(len(val_rows), 1)

    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    result = fit(
        trainable,
        batch_loss,
        len(train_rows),
        val_loss,
        config.train,
        seed=seed,
        checkpoint_dir=directory,
        desc=f"lora {name}",
        log=run.log,
    )
    lb.peft.eval()
    meta = ModuleMeta(
        kind="lora",
        config={
            "rank": config.rank,
            "alpha": config.alpha,
            "dropout": config.dropout,
            "target_modules": sorted(lb.peft.peft_config[name].target_modules),
            "dim": run.feature_dim,
        },
        backbone_fingerprint=lb.fingerprint,
        data_hash=run.data_hash,
        seed=run.config.seed,
        domain=domain,
        metrics=fit_metrics(result)
        | {
            "examples": len(train_rows),
            "val_examples": len(val_rows),
            "trainable_parameters": lb.parameters_of(name),
        },
    )
    lb.save(root, name, meta)
    Checkpoint(directory).remove()
    run.log({"stage": "peers", "event": "lora expert", "expert": name} | meta.metrics)
    return meta
