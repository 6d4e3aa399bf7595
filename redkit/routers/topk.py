"""Token-choice routers: each decision picks its top-k experts.

    switch     Switch Transformer (Fedus et al. 2022): top-1, gate = p_i (not renormalised, so the
               router gets a gradient through it), capacity ⌈c N / K⌉ in training (overflow dropped),
               load-balancing loss α K Σ f_i P_i with α = 1e-2
    top2       GShard (Lepikhin et al. 2021): top-2, gates renormalised over the two, capacity and the
               same balancing loss
    loss_free  Auxiliary-loss-free balancing (Wang et al. 2024): a per-expert bias b is added to the
               scores for *selection only*; after every training batch b_i += u sign(mean load - load_i),
               u = 1e-3. No auxiliary loss; the gate values are the unbiased probabilities.

As the MoE gate (trained on the task loss with the experts frozen), a top-1 router whose gate is
the unnormalised p_i (switch, loss_free) only ever gets a gradient that raises p_i of the expert it
already chose: nothing tells it another expert would do better, so it keeps its initial
preferences (the small analyses show the collapse: one or two experts take every decision). In
Switch's own setting the experts train too and this is what balancing counters; here it is what
the routing analysis measures.

Capacity dropping happens in training only (in evaluation every decision keeps its experts), so
the accuracy of a composition never depends on how the evaluation set is batched.
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.routers.base import (
    RouterBase,
    RouterOutput,
    balance_loss,
    capacity,
    mlp_scorer,
    register_router,
    scatter_weights,
    within_capacity,
)


@dataclass
class TopKConfig:
    dim: int
    num_experts: int  # K
    hidden: int = 256
    k: int = 1
    capacity_factor: float = 1.25  # c; 0 = no capacity
    aux_weight: float = 1e-2  # α of the load-balancing loss
    normalise: bool = False  # renormalise the gates over the k selected


class TopKRouter(RouterBase):
    Config = TopKConfig

    def __init__(self, config: TopKConfig):
        super().__init__()
        self.config = config
        self.scorer = mlp_scorer(config.dim, config.num_experts, config.hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K) logits
        return self.scorer(h)

    def select(self, probs: torch.Tensor) -> torch.Tensor:
        return probs.topk(self.config.k, dim=-1).indices  # (N, k)

    def route(self, h: torch.Tensor) -> RouterOutput:
        c = self.config
        logits = self(h)
        probs = F.softmax(logits, dim=-1)
        selected = self.select(probs)
        gates = probs.gather(1, selected)  # (N, k)
        if self.training and c.capacity_factor > 0:
            gates = gates * within_capacity(
                selected, c.num_experts, capacity(len(h), c.k, c.num_experts, c.capacity_factor)
            )
        aux = (
            c.aux_weight * balance_loss(probs, selected[:, 0], c.num_experts) if c.aux_weight else logits.new_zeros(())
        )
        return RouterOutput(scatter_weights(gates, selected, c.num_experts, c.normalise), selected, probs, logits, aux)


@register_router("switch")
class SwitchRouter(TopKRouter):
    """Switch Transformer top-1 routing with capacity and load-balancing loss."""


@dataclass
class Top2Config(TopKConfig):
    k: int = 2
    normalise: bool = True


@register_router("top2")
class Top2Router(TopKRouter):
    """GShard top-2 routing: gates renormalised over the two experts."""

    Config = Top2Config


@dataclass
class LossFreeConfig(TopKConfig):
    aux_weight: float = 0.0
    capacity_factor: float = 0.0
    update_rate: float = 1e-3  # u


@register_router("loss_free")
class LossFreeRouter(TopKRouter):
    """Top-k with a selection-only bias that balances the load without an auxiliary loss."""

    Config = LossFreeConfig

    def __init__(self, config: LossFreeConfig):
        super().__init__(config)
        self.register_buffer("bias", torch.zeros(config.num_experts))  # saved with the weights

    def select(self, probs: torch.Tensor) -> torch.Tensor:
        selected = (probs.detach() + self.bias).topk(self.config.k, dim=-1).indices
        if self.training:  # b_i += u sign(mean load - load_i), from this batch's load
            load = torch.bincount(selected.reshape(-1), minlength=self.config.num_experts).float()
            self.bias += self.config.update_rate * torch.sign(load.mean() - load)
        return selected
