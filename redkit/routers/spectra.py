"""SPECTRA (Sinkhorn Projected Experts for Consistent TRAjectory routing), as far as one routing
point per example allows.

    z = W h                                    projection of h (d -> p), p ≥ K
    s_i = scale · cos(z, e_i)                  cosine against per-expert prototypes e_i (orthogonal init)
    training:  q = Sinkhorn(exp(s))            rows and columns balanced (a few iterations, no gradient)
               selection = top-k of q, then a quota: each expert keeps its best ⌈1.25 N k / K⌉
    inference: plain top-k of softmax(s)       (no batch dependence)
    aux loss   λ · mean off-diagonal (ê_i · ê_j)^2     orthogonality penalty on the prototypes

Left out of the published description, and why: the GRU that carries routing state across layers
("consistent trajectory") and the expression projector both need a sequence of routing points
(layers or tokens); redkit routes each example once, on a pooled feature, so there is no trajectory
to carry. The speciality penalty and expert repulsion terms act on expert outputs during joint
training; redkit's experts are trained alone and frozen before any router sees them. All of them
exist at token level, inside Hugging Face MoE blocks: redkit_experiments.routing.token.spectra.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.routers.base import RouterBase, RouterOutput, capacity, register_router, scatter_weights


@dataclass
class SpectraConfig:
    dim: int
    num_experts: int  # K
    proj_dim: int = 64  # p (raised to K if smaller: K orthogonal prototypes need p ≥ K)
    k: int = 1
    scale: float = 10.0  # cosine -> logit temperature
    sinkhorn_iters: int = 3
    capacity_factor: float = 1.25  # the training quota ⌈c N k / K⌉
    ortho_weight: float = 1e-2  # λ


def sinkhorn(scores: torch.Tensor, iters: int) -> torch.Tensor:
    """(N, K) scores -> a matrix whose columns carry equal mass and whose rows sum to 1."""
    q = torch.exp(scores - scores.max())
    for _ in range(iters):
        q = q / q.sum(dim=0, keepdim=True)  # each expert the same total
        q = q / q.sum(dim=1, keepdim=True)  # each decision one unit
    return q


def orthogonality_penalty(vectors: torch.Tensor) -> torch.Tensor:
    """(K, p) -> mean off-diagonal squared cosine between the K rows (0 when they are orthogonal)."""
    e = F.normalize(vectors, dim=-1)
    gram = e @ e.T
    k = len(e)
    return (gram - torch.eye(k, device=e.device, dtype=e.dtype)).pow(2).sum() / max(k * (k - 1), 1)


def quota(balanced: torch.Tensor, selected: torch.Tensor, cap: int) -> torch.Tensor:
    """(N, k) bool: the selection kept when each expert takes its `cap` best-scoring decisions."""
    mask = torch.zeros_like(balanced, dtype=torch.bool).scatter(1, selected, True)
    score = balanced.masked_fill(~mask, -1.0)
    rank = score.argsort(dim=0, descending=True).argsort(dim=0)  # each decision's place in its expert's queue
    return (mask & (rank < cap)).gather(1, selected)


@register_router("spectra")
class SpectraRouter(RouterBase):
    Config = SpectraConfig

    def __init__(self, config: SpectraConfig):
        super().__init__()
        self.config = config
        p = max(config.proj_dim, config.num_experts)
        self.project = nn.Linear(config.dim, p)
        self.prototypes = nn.Parameter(torch.empty(config.num_experts, p))  # (K, p)
        nn.init.orthogonal_(self.prototypes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K) logits
        z = F.normalize(self.project(h), dim=-1)
        return self.config.scale * z @ F.normalize(self.prototypes, dim=-1).T

    def orthogonality(self) -> torch.Tensor:
        return orthogonality_penalty(self.prototypes)

    def route(self, h: torch.Tensor) -> RouterOutput:
        c = self.config
        logits = self(h)
        probs = F.softmax(logits, dim=-1)
        if self.training:
            with torch.no_grad():
                balanced = sinkhorn(logits, c.sinkhorn_iters)
                selected = balanced.topk(c.k, dim=-1).indices
                keep = quota(balanced, selected, capacity(len(h), c.k, c.num_experts, c.capacity_factor))
            gates = probs.gather(1, selected) * keep
        else:
            selected = probs.topk(c.k, dim=-1).indices
            gates = probs.gather(1, selected)
        weights = scatter_weights(gates, selected, c.num_experts, normalise=c.k > 1)
        return RouterOutput(weights, selected, probs, logits, c.ortho_weight * self.orthogonality())
