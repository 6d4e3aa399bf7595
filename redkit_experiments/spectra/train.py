"""Training one variant of the tiny Mixtral from scratch (or continuing one), on the three-domain corpus.

    loss = LM cross-entropy
         + aux_coef · the model's load-balancing loss    (stock / dense gates only: their method)
         + Σ the token routers' own auxiliary losses      (switch / top2 balancing, SPECTRA's penalties)

AdamW, linear warm-up then cosine decay, gradient clipping at 1. Every `measure_every` steps a
`RoutingMonitor` routes a fixed probe (held-out windows of every domain) in evaluation mode and
logs per-layer routing metrics and their stability against the previous measurement (routing.jsonl).
The batches come from a generator seeded by the run's seed alone: every variant sees the same tokens.
"""

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from redkit_experiments.routing.hf import RoutingMonitor
from redkit_experiments.spectra.corpus import Corpus, heldout_batches, train_batch
from redkit_experiments.spectra.model import uses_model_balance_loss


@dataclass
class TrainConfig:
    steps: int = 200
    batch: int = 12  # sequences per step, a third per domain
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.01
    measure_every: int = 10  # steps between two routing measurements of the probe
    probe_sequences: int = 4  # held-out windows per domain in the probe


def lm_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of (B, T, V) logits on (B, T) ids."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def learning_rate(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(config.steps - config.warmup, 1)
    return config.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def probe_batch(corpus: Corpus, length: int, sequences: int) -> dict:
    ids = torch.cat([ids for ids, _ in heldout_batches(corpus, length, sequences)])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def train(
    model,
    corpus: Corpus,
    config: TrainConfig,
    length: int,
    generator: torch.Generator,
    log_dir: Path,
    label: str = "",
    step_offset: int = 0,
) -> dict:
    """Train `model` for config.steps steps; returns {losses, seconds, routing rows}."""
    log_dir.mkdir(parents=True, exist_ok=True)
    routing_log = log_dir / "routing.jsonl"
    routing_log.unlink(missing_ok=True)
    monitor = RoutingMonitor(
        probe_batch(corpus, length, config.probe_sequences), routing_log, every=config.measure_every
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.95))
    balance = uses_model_balance_loss(model)
    from redkit_experiments.routing.token import router_aux_loss

    device = next(model.parameters()).device
    model.train()
    losses, start = [], time.perf_counter()
    monitor.measure(model, step_offset)
    for step in tqdm(range(config.steps), desc=label or "train", leave=False, mininterval=5):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        ids, _ = train_batch(corpus, config.batch, length, generator)
        ids = ids.to(device)
        out = model(input_ids=ids, output_router_logits=True)
        lm = lm_loss(out.logits, ids)
        loss = lm + router_aux_loss(model).to(device)
        if balance:
            loss = loss + model.config.router_aux_loss_coef * out.aux_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(lm.detach()))
        if (step + 1) % config.measure_every == 0 or step + 1 == config.steps:
            monitor.measure(model, step_offset + step + 1)
    seconds = time.perf_counter() - start
    return {
        "train_loss": losses,
        "seconds": seconds,
        "seconds_per_step": seconds / max(config.steps, 1),
        "routing": monitor.rows,
    }
