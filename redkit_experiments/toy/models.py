"""The toy models and the ways the toy experiments combine independently trained ones.

Experts: a linear map 2 -> 1 (experiment A), an MLP 2 -> 64 -> 64 -> 1 with ReLU (B), and a
residual expert r(x) = 0.1 * MLP(x) added to a frozen linear base (C).

Combinations, all built from already-trained modules, nothing retrained:
- `average_parameters`: one model whose every tensor is the mean of the experts' tensors. It only
  means something when the experts share one optimum (the linear case of Proposition 1).
- `OutputAverage`: (1/K) sum_i f_i(x).
- `BasePlusResiduals`: f_base(x) + sum_i alpha_i r_i(x), the composition of Proposition 3.
"""

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn


def linear_expert() -> nn.Linear:
    return nn.Linear(2, 1)


class MLP(nn.Sequential):
    """2 -> hidden -> hidden -> 1 with ReLU: expressive enough to fit its own interval in its own way."""

    def __init__(self, hidden: int = 64):
        super().__init__(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))


class Scaled(nn.Module):
    """scale * module(x): the residual expert r(x) = 0.1 * MLP(x), whose output stays small."""

    def __init__(self, module: nn.Module, scale: float):
        super().__init__()
        self.module = module
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:  # (N, 2) -> (N, 1)
        return self.scale * self.module(x)


class OutputAverage(nn.Module):
    def __init__(self, experts: Sequence[nn.Module]):
        super().__init__()
        self.experts = nn.ModuleList(experts)

    def forward(self, x: Tensor) -> Tensor:  # (N, 2) -> (N, 1)
        return torch.stack([f(x) for f in self.experts]).mean(dim=0)  # (K, N, 1) -> (N, 1)


class BasePlusResiduals(nn.Module):
    """f_base(x) + sum_i alpha_i r_i(x). The base is frozen: an expert trained through this module
    can only change its own residual, so whatever it learns is a correction to the shared base."""

    def __init__(self, base: nn.Module, residuals: Sequence[nn.Module], alphas: Sequence[float]):
        super().__init__()
        if len(residuals) != len(alphas):
            raise ValueError(f"{len(residuals)} residuals but {len(alphas)} mixing weights")
        self.base = base.requires_grad_(False)
        self.residuals = nn.ModuleList(residuals)
        self.alphas = list(alphas)

    def forward(self, x: Tensor) -> Tensor:  # (N, 2) -> (N, 1)
        out = self.base(x)
        for alpha, r in zip(self.alphas, self.residuals):
            out = out + alpha * r(x)
        return out


def average_parameters(experts: Sequence[nn.Module]) -> nn.Module:
    """A copy of the first expert holding the element-wise mean of all experts' tensors."""
    states = [e.state_dict() for e in experts]
    mean = {k: torch.stack([s[k] for s in states]).mean(dim=0) for k in states[0]}
    merged = copy.deepcopy(experts[0])
    merged.load_state_dict(mean)
    return merged


def seeded(seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """Build a module with its initial weights drawn from `seed`, leaving the global RNG untouched,
    so each expert's start depends on its own seed only and not on what was built before it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()
