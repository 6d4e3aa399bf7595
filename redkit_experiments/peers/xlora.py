"""peft's X-LoRA (a trained router over frozen LoRA experts) on the run's backbone.

X-LoRA runs the adapted layers twice per input: a scaling pass (adapters off) whose last hidden
states (B, T, d) feed its classifier, which predicts per-token scalings (B, T, layers, K) of the K
frozen experts, then the real pass with those scalings. Its classifier is trained on the task loss
through the frozen classifier C (like the MoE gate; RED's router is trained on the domain label).

Loading it on a BERT-style encoder, two attempts:

    as_is     get_peft_model(HF model, XLoraConfig(adapters={domain: dir}))  -> recorded, never raised
    wrapped   the HF model inside `HasModel` (a module exposing `.model` and `.config`), adapters
              keyed "0" .. "K-1": what `lora_xlora` uses

Why the first fails (peft issue #2132): X-LoRA loads each adapter with its own loader, which
rewrites every weight key to `model.model.<path>`, assuming the base is a *ForCausalLM whose
transformer sits at `.model`; a BertModel's layers sit at `model.encoder...` under the LoRA model,
so every key is "unexpected". The wrapper supplies that `.model` level. It also needs the adapters
named "0" .. "K-1": the loader names them by position but then activates them by their dict keys
(KeyError otherwise).
"""

import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.store import ModuleMeta, load_state, module_exists, save_module
from redkit.train.loop import Checkpoint, TrainConfig, fit
from redkit_experiments.peers.lora import LoraBackbone
from redkit_experiments.peers.train import domain_sample, prefix_states


@dataclass
class XLoraSettings:
    # X-LoRA runs the adapted layers twice per step with all K experts in each: about 2x a LoRA
    # expert's cost per example (8 ms per example and epoch measured idle, 2 CPU cores), hence a small sample.
    examples: int = 1000  # training examples of its classifier, balanced over the domains
    val_examples: int = 500
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=1e-3, batch_size=64, virtual_batch_size=64, max_epochs=3, patience=2)
    )


class HasModel(nn.Module):
    """An encoder seen as X-LoRA expects a model: its transformer at `.model`, its config at `.config`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


def _xlora(run, directories: list[Path], wrapped: bool) -> LoraBackbone:
    from peft import XLoraConfig, get_peft_model

    lb = LoraBackbone(run)
    lb.base_model.config.use_cache = False  # X-LoRA refuses a model that caches keys and values
    keys = [str(i) for i in range(len(directories))] if wrapped else list(run.space.domains)
    config = XLoraConfig(hidden_size=lb.backbone.hidden_size, adapters={k: str(d) for k, d in zip(keys, directories)})
    torch.manual_seed(run.config.seed * 1000 + 600)  # X-LoRA's classifier is initialised inside get_peft_model
    lb.wrap(get_peft_model(HasModel(lb.base_model) if wrapped else lb.base_model, config))
    return lb


def failure(err: Exception) -> dict:
    frames = traceback.extract_tb(err.__traceback__)
    where = next(
        (f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames) if "peft" in f.filename), ""
    )
    return {"loads": False, "error": f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}", "where": where}


def try_as_is(run, directories: list[Path], batch) -> dict:
    """Load X-LoRA on the HF model itself and run one batch; what happened, never raised."""
    try:
        lb = _xlora(run, directories, wrapped=False)
        with torch.no_grad():
            lb.features(batch)
        return {"loads": True}
    except Exception as err:  # noqa: BLE001 -- recording peft's failure is the point
        return failure(err)


def xlora_backbone(run, directories: list[Path]) -> LoraBackbone:
    """A fresh copy of the backbone under X-LoRA (wrapped) over the experts in `directories`."""
    lb = _xlora(run, directories, wrapped=True)
    lb.peft.eval()
    return lb


def xlora_classifier(lb: LoraBackbone) -> nn.Module:
    return lb.peft.base_model.internal_xlora_classifier


def train_xlora(run, lb: LoraBackbone, classifier: nn.Module, directory: Path, settings: XLoraSettings) -> ModuleMeta:
    """Train X-LoRA's classifier on a domain-balanced sample of train (task loss through frozen C),
    or load the one in `directory` (checked against the backbone); saved as a redkit module."""
    router = xlora_classifier(lb)
    if module_exists(directory):
        state, meta = load_state(directory, lb.fingerprint)
        router.load_state_dict(state)
        return meta
    k = run.space.num_domains
    seed = run.config.seed * 1000 + 600
    train_rows = sorted(i for d in range(k) for i in domain_sample(run, "train", d, settings.examples // k, seed + d))
    val_rows = sorted(
        i for d in range(k) for i in domain_sample(run, "val", d, settings.val_examples // k, seed + 10 + d)
    )
    train_states, train_y = prefix_states(run, lb, "train", train_rows, "peers-xlora-train")
    val_states, val_y = prefix_states(run, lb, "val", val_rows, "peers-xlora-val")
    classifier = classifier.requires_grad_(False).eval()
    device = run.device

    def loss(states, y, idx: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(
            classifier(lb.features(states.batch(idx, device))), y[idx].to(device), reduction=reduction
        )

    def val_loss() -> float:
        return sum(
            loss(val_states, val_y, torch.arange(f, min(f + 512, len(val_rows))), "sum").item()
            for f in range(0, len(val_rows), 512)
        ) / max(len(val_rows), 1)

    directory.mkdir(parents=True, exist_ok=True)
    result = fit(
        nn.ModuleDict({"xlora": router}),
        lambda idx: loss(train_states, train_y, idx),
        len(train_rows),
        val_loss,
        settings.train,
        seed=seed,
        checkpoint_dir=directory,
        desc="xlora",
        log=run.log,
    )
    lb.peft.eval()
    meta = ModuleMeta(
        kind="xlora_classifier",
        config={"dim": run.feature_dim, "experts": k},
        backbone_fingerprint=lb.fingerprint,
        data_hash=run.data_hash,
        seed=run.config.seed,
        metrics={
            "best_val_loss": result.best_val_loss,
            "epochs": result.epochs,
            "seconds": result.seconds,
            "examples": len(train_rows),
            "trainable_parameters": sum(p.numel() for p in router.parameters()),
        },
    )
    save_module(directory, router, meta)
    Checkpoint(directory).remove()
    return meta


def xlora_weights(lb: LoraBackbone, mask: torch.Tensor) -> torch.Tensor:
    """The last forward's X-LoRA scalings (B, T, layers, K), averaged over layers and real tokens -> (B, K)."""
    scalings = lb.peft.get_latest_scalings().mean(dim=2)  # (B, T, K)
    w = mask.unsqueeze(-1).to(scalings.dtype)
    return (scalings * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)
