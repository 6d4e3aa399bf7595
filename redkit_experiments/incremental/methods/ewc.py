"""Elastic weight consolidation (Kirkpatrick et al., PNAS 2017), online (Schwarz et al., ICML 2018, §3 "online
EWC"):

    loss = CE + (λ / 2) Σ_i F*_i (θ_i - θ*_i)²
    F*  ←  γ F* + F_t        after step t,  F_t,i = (1 / N_t) Σ_n (∂ log p(y_n | x_n; θ) / ∂θ_i)²

θ* the weights after the last step; F_t the empirical Fisher of step t's training data: the squared gradient of
each example's own log-likelihood, averaged over the examples (not the square of a mini-batch's mean gradient,
which underestimates it by about the batch size); γ the decay of the earlier steps' Fisher (1: Kirkpatrick's sum).
λ and γ come from the tuning stream (tuning.py). Kept: F* and θ* (two copies of the tuned weights).
"""

import torch

from redkit_experiments.incremental.data import StepData
from redkit_experiments.incremental.methods.base import Kept, register_method, tensor_bytes
from redkit_experiments.incremental.methods.finetune import FineTuned


@register_method("ewc")
class EWC(FineTuned):
    keeps = "Fisher diagonal + last weights"

    def __init__(self, setting):
        super().__init__(setting)
        self.fisher: dict[str, torch.Tensor] = {}  # F*, per tuned parameter
        self.anchor: dict[str, torch.Tensor] = {}  # θ*

    def extra_loss(self, batch, logits: torch.Tensor) -> torch.Tensor | float:
        if not self.fisher:
            return 0.0
        penalty = sum(
            (self.fisher[name] * (p - self.anchor[name]) ** 2).sum()
            for name, p in self.trainable.named_parameters()
            if name in self.fisher
        )
        return 0.5 * self.setting.config.hyper("ewc", "lambda", self.name) * penalty

    def after_step(self, step: StepData) -> None:
        fisher = empirical_fisher(self, step)
        gamma = self.setting.config.hyper("ewc", "gamma", self.name)
        for name, value in fisher.items():
            self.fisher[name] = gamma * self.fisher[name] + value if name in self.fisher else value
        self.anchor = {name: p.detach().clone() for name, p in self.trainable.named_parameters()}

    def kept(self) -> Kept:
        return Kept(
            statistics_bytes=tensor_bytes(*self.fisher.values()), weight_bytes=tensor_bytes(*self.anchor.values())
        )


def empirical_fisher(learner: FineTuned, step: StepData) -> dict[str, torch.Tensor]:
    """The mean over step t's training examples of each example's squared log-likelihood gradient, one example
    at a time (per-example gradients: a batch's gradient is the mean of its examples', whose square is not)."""
    params = dict(learner.trainable.named_parameters())
    fisher = {name: torch.zeros_like(p) for name, p in params.items()}
    train = step.train
    learner.trainable.eval()  # no dropout: the Fisher of the model as it now predicts
    for n in range(len(train)):
        example = train.subset([n])
        learner.trainable.zero_grad(set_to_none=True)
        learner.cross_entropy(learner.logits(example), example.classes).backward()  # -log p(y_n | x_n)
        for name, p in params.items():
            if p.grad is not None:
                fisher[name] += p.grad.detach() ** 2
    learner.trainable.zero_grad(set_to_none=True)
    return {name: value / len(train) for name, value in fisher.items()}
