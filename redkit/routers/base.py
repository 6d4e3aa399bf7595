"""The pieces the routers of the zoo share. What a router is (`RouterBase`, `RouterOutput`: weights,
selected, probs, logits, aux_loss) is defined once, for the dense router too, in the leaf
redkit.modules.routing and re-exported here. Every zoo router's forward gives (N, K) logits, so it
drops in wherever the dense router does.
"""

import math

import torch
from torch.nn import functional as F

from redkit.modules.layers import MODULES, ROUTERS, Router, RouterConfig
from redkit.modules.routing import RouterBase, RouterOutput  # noqa: F401  (re-exported for the zoo)


def register_router(name: str):
    """Register a router class under `name` (ROUTERS, `--router NAME`) and as module kind
    `router_<name>` (MODULES: how a saved one is rebuilt)."""

    def add(cls):
        cls.name, cls.kind = name, f"router_{name}"
        MODULES.register(cls.kind)(cls)
        ROUTERS.register(name)(cls)
        return cls

    return add


def mlp_scorer(dim: int, num_experts: int, hidden: int) -> Router:
    """The dense router's two-layer MLP h -> K scores, the scoring net of the trained zoo routers."""
    return Router(RouterConfig(dim=dim, num_experts=num_experts, hidden=hidden))


def capacity(n: int, k: int, num_experts: int, factor: float) -> int:
    """⌈c N k / K⌉ assignments per expert."""
    return math.ceil(factor * n * k / num_experts)


def within_capacity(selected: torch.Tensor, num_experts: int, cap: int) -> torch.Tensor:
    """(N, k) -> (N, k) bool: the assignment fits in its expert's first `cap` places. Every first
    choice queues before any second one, in batch order (Switch / GShard's dropping)."""
    n, k = selected.shape
    order = selected.T.reshape(-1)  # (k N,) choice-major
    one_hot = F.one_hot(order, num_experts)
    place = (one_hot.cumsum(dim=0) * one_hot).sum(dim=1)  # 1-based place in its expert's queue
    return (place <= cap).reshape(k, n).T


def balance_loss(probs: torch.Tensor, first: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Switch / GShard load-balancing loss K Σ_i f_i P_i: f_i the share of first choices on expert
    i, P_i its mean probability (1 at perfect balance)."""
    f = torch.bincount(first, minlength=num_experts).float() / len(first)
    return num_experts * (f * probs.mean(dim=0)).sum()


def scatter_weights(gates: torch.Tensor, selected: torch.Tensor, num_experts: int, normalise: bool) -> torch.Tensor:
    """(N, k) gate values at `selected` -> (N, K) weights (renormalised over the selection if asked)."""
    if normalise:
        gates = gates / gates.sum(dim=1, keepdim=True).clamp(min=1e-9)
    return torch.zeros(len(gates), num_experts, dtype=gates.dtype, device=gates.device).scatter(1, selected, gates)
