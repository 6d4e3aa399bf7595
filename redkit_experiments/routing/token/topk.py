"""Token-choice routers at token level (each token picks its experts), the pooled zoo's rules
(redkit.routers.topk) applied to the real tokens of a batch:

    dense      the stock transformers gate: softmax over a linear score, top-k, renormalised (Mixtral;
               Qwen-MoE / OLMoE: renormalised iff the model's norm_topk_prob). Replacing a stock gate by
               it copies the weight and gives bit-identical outputs; trained with the model's own
               load-balancing loss
    switch     Switch Transformer: top-1, gate p_i (not renormalised), capacity ⌈c N / E⌉ in training
               (overflow gets weight 0), its load-balancing loss α E Σ f_i P_i, α = 1e-2
    top2       GShard: top-2, gates renormalised over the two, capacity, the same balancing loss
    loss_free  auxiliary-loss-free balancing: a per-expert bias on the scores for selection only,
               b_i += u sign(mean load - load_i) after every training forward, u = 1e-3

switch / top2 / loss_free start from the replaced gate's weight (the same linear score), so a
swap into a trained model continues from its routing preferences.
"""

from dataclasses import dataclass

import torch

from redkit.routers.base import balance_loss, capacity, within_capacity
from redkit_experiments.routing.token.base import (
    TOKEN_ROUTERS,
    LinearScoreRouter,
    TokenRouterConfig,
    fill_real,
    renormalise,
    softmax_top_k,
)


@dataclass
class DenseConfig(TokenRouterConfig):
    normalise: bool = True  # renormalise the top-k weights (Mixtral: always; Qwen/OLMoE: norm_topk_prob)
    cast_to_logits_dtype: bool = False  # Qwen/OLMoE cast the weights back to the logits' dtype


@TOKEN_ROUTERS.register("dense")
class DenseTopKRouter(LinearScoreRouter):
    """The stock gate, as a token router."""

    Config = DenseConfig
    uses_model_balance_loss = True

    def route_tokens(self, x, real):
        c = self.config
        logits = self.scores(x)  # (N, E)
        _, top, index = softmax_top_k(logits, c.top_k)
        if c.normalise:
            top = top / top.sum(dim=-1, keepdim=True)
        if c.cast_to_logits_dtype:
            top = top.to(logits.dtype)
        return logits, top, index, logits.new_zeros(())


@dataclass
class SwitchConfig(TokenRouterConfig):
    top_k: int = 1
    capacity_factor: float = 1.25  # c; 0 = no capacity
    aux_weight: float = 1e-2  # α
    normalise: bool = False


class CapacityTopKRouter(LinearScoreRouter):
    """Top-k with capacity dropping and the Switch / GShard balancing loss, on real tokens."""

    def select(self, probs: torch.Tensor) -> torch.Tensor:  # (n, E) -> (n, k)
        return probs.topk(self.config.top_k, dim=-1).indices

    def route_tokens(self, x, real):
        c = self.config
        logits = self.scores(x)  # (N, E)
        probs, _, plain = softmax_top_k(logits, c.top_k)
        p_real = probs[real]  # (n, E)
        selected = self.select(p_real)  # (n, k)
        gates = p_real.gather(1, selected)
        if self.training and c.capacity_factor > 0:
            gates = gates * within_capacity(
                selected, c.num_experts, capacity(len(p_real), c.top_k, c.num_experts, c.capacity_factor)
            )
        if c.normalise:
            gates = renormalise(gates)
        index = fill_real(plain, real, selected)
        weights = fill_real(probs.gather(1, plain), real, gates)
        aux = (
            c.aux_weight * balance_loss(p_real, selected[:, 0], c.num_experts)
            if c.aux_weight and len(p_real)
            else logits.new_zeros(())
        )
        return logits, weights, index, aux


@TOKEN_ROUTERS.register("switch")
class SwitchTokenRouter(CapacityTopKRouter):
    Config = SwitchConfig


@dataclass
class Top2Config(SwitchConfig):
    top_k: int = 2
    normalise: bool = True


@TOKEN_ROUTERS.register("top2")
class Top2TokenRouter(CapacityTopKRouter):
    Config = Top2Config


@dataclass
class LossFreeConfig(TokenRouterConfig):
    update_rate: float = 1e-3  # u
    capacity_factor: float = 0.0
    aux_weight: float = 0.0
    normalise: bool = True


@TOKEN_ROUTERS.register("loss_free")
class LossFreeTokenRouter(CapacityTopKRouter):
    Config = LossFreeConfig

    def __init__(self, config: LossFreeConfig):
        super().__init__(config)
        self.register_buffer("bias", torch.zeros(config.num_experts))

    def select(self, probs):
        selected = (probs.detach() + self.bias).topk(self.config.top_k, dim=-1).indices
        if self.training and len(probs):  # b_i += u sign(mean load - load_i), this batch's real tokens
            load = torch.bincount(selected.reshape(-1), minlength=self.config.num_experts).float()
            self.bias += self.config.update_rate * torch.sign(load.mean() - load)
        return selected
