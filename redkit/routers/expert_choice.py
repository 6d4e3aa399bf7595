"""Expert Choice routing (Zhou et al. 2022): each expert picks its top-C decisions of the batch,
C = ⌈c N k / K⌉ (c = 2, k = 1: each decision gets two experts on average).

NON-CAUSAL: a decision's experts depend on the other decisions in its batch (an expert that is
full with better-scoring ones passes it over), so the same example can be routed differently in
another batch, and a decision may get no expert at all (weights all 0: the composition falls back
to the base) or several. Perfect load balance by construction; no auxiliary loss.
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.routers.base import RouterBase, RouterOutput, capacity, mlp_scorer, register_router


@dataclass
class ExpertChoiceConfig:
    dim: int
    num_experts: int  # K
    hidden: int = 256
    k: int = 1  # average experts per decision
    capacity_factor: float = 2.0  # c


@register_router("expert_choice")
class ExpertChoiceRouter(RouterBase):
    Config = ExpertChoiceConfig

    def __init__(self, config: ExpertChoiceConfig):
        super().__init__()
        self.config = config
        self.scorer = mlp_scorer(config.dim, config.num_experts, config.hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K) logits
        return self.scorer(h)

    def route(self, h: torch.Tensor) -> RouterOutput:
        c = self.config
        logits = self(h)
        probs = F.softmax(logits, dim=-1)
        per_expert = min(len(h), capacity(len(h), c.k, c.num_experts, c.capacity_factor))  # C
        chosen = probs.topk(per_expert, dim=0)  # each expert's C best decisions: (C, K)
        weights = torch.zeros_like(probs).scatter(0, chosen.indices, chosen.values)  # (N, K)
        # A decision's "selected" experts, for the load metrics: its heaviest weights (an unchosen
        # decision reports its most probable expert).
        selected = (weights + 1e-6 * probs.detach()).topk(c.k, dim=-1).indices
        return RouterOutput(weights, selected, probs, logits, logits.new_zeros(()))
