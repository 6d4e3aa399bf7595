"""What every router of the zoo returns, and the pieces they share.

A router only routes: like transformers' Mixtral block, routing (weights, selected experts,
auxiliary loss) is computed apart from the experts, and the mixture code (redkit.compositions)
combines whatever experts it has with `weights`. Every zoo router is an nn.Module whose forward
gives (N, K) logits, so it drops in wherever the dense router does, and whose `route` gives:

    weights   (N, K)  combination weights, 0 outside the selection (what the mixture uses)
    selected  (N, k)  the chosen experts, best first (what the load metrics count)
    probs     (N, K)  the full routing distribution (what entropy and margin read)
    logits    (N, K)  pre-softmax scores (z-loss; RED's router is supervised on them)
    aux_loss  ()      the router's auxiliary loss, already weighted (0 where it has none)
"""

import math
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.layers import MODULES, ROUTERS, Router, RouterConfig


class RouterOutput(NamedTuple):
    weights: torch.Tensor  # (N, K)
    selected: torch.Tensor  # (N, k)
    probs: torch.Tensor  # (N, K)
    logits: torch.Tensor  # (N, K)
    aux_loss: torch.Tensor  # ()


def register_router(name: str):
    """Register a router class under `name` (ROUTERS, `--router NAME`) and as module kind
    `router_<name>` (MODULES: how a saved one is rebuilt)."""
    def add(cls):
        cls.name, cls.kind = name, f"router_{name}"
        MODULES.register(cls.kind)(cls)
        ROUTERS.register(name)(cls)
        return cls
    return add


def route(router: nn.Module, h: torch.Tensor) -> RouterOutput:
    """Any router's routing of h (N, d): a zoo router's own, or the dense router's (softmax, top-1)."""
    if hasattr(router, "route"):
        return router.route(h)
    logits = router(h)
    probs = F.softmax(logits, dim=-1)
    return RouterOutput(probs, probs.argmax(dim=-1, keepdim=True), probs, logits, logits.new_zeros(()))


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
