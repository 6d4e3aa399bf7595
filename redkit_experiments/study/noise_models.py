"""Routing-noise models: ways the expert weights α of a routed composition can be wrong.

Each is a pure function of the router's logits z (N, K), the true domains y (N,), a level and a
torch.Generator, returning perturbed weights α (N, K) whose rows sum to 1:

    logit      α = softmax(z + σ ε),  ε ~ N(0, I)                 σ ∈ {0, 0.5, 1, 2, 4, 8}
               (a router that is unsure: its logits jitter)
    misroute   with probability p: α = one_hot(j), j ~ U{k ≠ y}     p ∈ {0, .05, .1, .2, .3, .5}
               otherwise α = softmax(z)  (a confident wrong choice, any wrong expert)
    neighbour  the same, j ~ U({y − 1, y + 1} ∩ [0, K))             p ∈ {0, .05, .1, .2, .3, .5}
               (the realistic mistake of a range router: R2 -> R1 or R3)
    flatten    α = (1 − λ) softmax(z) + λ / K                      λ ∈ {0, .25, .5, .75, 1}
               (a router that spreads its weight; λ = 1 is the uniform mixture)

Level 0 of every model is the unperturbed router.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.registry import Registry


@dataclass(frozen=True)
class NoiseModel:
    name: str
    symbol: str  # the level's name on a figure's axis
    formula: str  # for reports
    levels: tuple[float, ...]  # the default grid
    bounds: tuple[float, float]  # levels outside are refused
    perturb: Callable[[torch.Tensor, torch.Tensor, float, torch.Generator], torch.Tensor]

    def check(self, level: float) -> float:
        low, high = self.bounds
        if not low <= level <= high:
            raise RedkitError(f"noise model {self.name}: level {level} is outside [{low}, {high}]")
        return level


NOISE_MODELS: Registry[NoiseModel] = Registry("noise model")


def _register(model: NoiseModel) -> None:
    NOISE_MODELS.register(model.name)(model)


def logit_noise(logits: torch.Tensor, true: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    noise = torch.randn(logits.shape, generator=gen, dtype=logits.dtype).to(logits.device)
    return F.softmax(logits + sigma * noise, dim=-1)


def _replace_with(logits: torch.Tensor, p: float, wrong: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """softmax(z), with the rows drawn at probability p set to one_hot(wrong)."""
    alpha = F.softmax(logits, dim=-1)
    hit = (torch.rand(logits.shape[0], generator=gen) < p).to(logits.device)
    return torch.where(hit.unsqueeze(-1), F.one_hot(wrong, logits.shape[-1]).to(alpha.dtype), alpha)


def misroute(logits: torch.Tensor, true: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    k = logits.shape[-1]
    # y + U{1..K-1} mod K is uniform over the K - 1 experts that are not y.
    wrong = (true + torch.randint(1, k, true.shape, generator=gen).to(true.device)) % k
    return _replace_with(logits, p, wrong, gen)


def neighbour(logits: torch.Tensor, true: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    k = logits.shape[-1]
    step = torch.where(torch.rand(true.shape, generator=gen) < 0.5, -1, 1).to(true.device)
    wrong = true + step
    wrong = torch.where(wrong < 0, true + 1, torch.where(wrong >= k, true - 1, wrong))  # the ends have one neighbour
    return _replace_with(logits, p, wrong, gen)


def flatten(logits: torch.Tensor, true: torch.Tensor, lam: float, gen: torch.Generator) -> torch.Tensor:
    return (1 - lam) * F.softmax(logits, dim=-1) + lam / logits.shape[-1]


_register(
    NoiseModel(
        "logit", "σ", "α = softmax(z + σ ε), ε ~ N(0, I)", (0.0, 0.5, 1.0, 2.0, 4.0, 8.0), (0.0, 100.0), logit_noise
    )
)
_register(
    NoiseModel(
        "misroute",
        "p",
        "with prob. p: α = one_hot(j), j ~ U{k ≠ y}; else softmax(z)",
        (0.0, 0.05, 0.1, 0.2, 0.3, 0.5),
        (0.0, 1.0),
        misroute,
    )
)
_register(
    NoiseModel(
        "neighbour",
        "p",
        "with prob. p: α = one_hot(y ± 1); else softmax(z)",
        (0.0, 0.05, 0.1, 0.2, 0.3, 0.5),
        (0.0, 1.0),
        neighbour,
    )
)
_register(
    NoiseModel("flatten", "λ", "α = (1 − λ) softmax(z) + λ / K", (0.0, 0.25, 0.5, 0.75, 1.0), (0.0, 1.0), flatten)
)
