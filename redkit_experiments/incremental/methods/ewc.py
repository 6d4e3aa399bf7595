"""Elastic weight consolidation (Kirkpatrick et al., PNAS 2017), online (Schwarz et al., ICML 2018):

    loss = CE + (λ / 2) Σ_i F_i (θ_i - θ*_i)²

θ* the weights after the last step, F the diagonal Fisher information summed over the steps so far, each
step's estimated after it as Avalanche does: the squared gradient of the cross-entropy, per mini-batch of the
step's training data, averaged over its batches. Kept: F and θ* (two copies of the tuned weights).
"""

import torch

from redkit_experiments.incremental.methods.base import Kept, register_method, tensor_bytes
from redkit_experiments.incremental.methods.finetune import FineTuned

FISHER_BATCH = 32


@register_method("ewc")
class EWC(FineTuned):
    keeps = "Fisher diagonal + last weights"

    def __init__(self, context):
        super().__init__(context)
        self.fisher: dict[str, torch.Tensor] = {}
        self.anchor: dict[str, torch.Tensor] = {}

    def extra_loss(self, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | float:
        if not self.fisher:
            return 0.0
        penalty = sum(
            (self.fisher[name] * (p - self.anchor[name]) ** 2).sum()
            for name, p in self.trainable.named_parameters()
            if name in self.fisher
        )
        return 0.5 * self.context.config.ewc_lambda * penalty

    def after_step(self, t: int, rows: torch.Tensor) -> None:
        params = dict(self.trainable.named_parameters())
        fisher = {name: torch.zeros_like(p) for name, p in params.items()}
        labels = self.context.stream.class_of["train"]
        batches = rows.split(FISHER_BATCH)
        self.trainable.eval()
        for batch in batches:
            self.trainable.zero_grad(set_to_none=True)
            self.cross_entropy(self.logits("train", batch), labels[batch]).backward()
            for name, p in params.items():
                if p.grad is not None:
                    fisher[name] += p.grad.detach() ** 2 / len(batches)
        self.trainable.zero_grad(set_to_none=True)
        for name, value in fisher.items():
            self.fisher[name] = self.fisher.get(name, 0) + value
        self.anchor = {name: p.detach().clone() for name, p in params.items()}

    def kept(self) -> Kept:
        return Kept(
            statistics_bytes=tensor_bytes(*self.fisher.values()), weight_bytes=tensor_bytes(*self.anchor.values())
        )
