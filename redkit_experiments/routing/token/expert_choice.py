"""Expert Choice at token level (Zhou et al. 2022): each expert takes its C best real tokens of the
batch, C = ⌈c N k / E⌉ (c = 1: on average k experts per token, the compute of top-k).

A token may get 0..E experts, so the contract's slots are m wide, m the most experts any token of
the batch got: a token's chosen experts first, then unchosen ones with weight 0 (computed, adding
nothing). Not the "no expert" sentinel E: transformers' default grouped_mm experts leave its rows
uninitialised unless expert-parallel, and 0 x NaN poisons the block. Gates are the token's softmax
probabilities over experts (the paper's).

NON-CAUSAL in training: a token's experts depend on the other tokens of the batch, later ones
included, which a causal language model must not see. In evaluation (`model.eval()`) it therefore
routes by token choice (plain top-k of the same probabilities, renormalised), the causal reading
the paper leaves open; the held-out loss is measured that way.
"""

from dataclasses import dataclass

import torch

from redkit.routers.base import capacity
from redkit_experiments.routing.token.base import (
    TOKEN_ROUTERS,
    LinearScoreRouter,
    TokenRouterConfig,
    renormalise,
    softmax_top_k,
)


@dataclass
class ExpertChoiceConfig(TokenRouterConfig):
    capacity_factor: float = 1.0  # c


@TOKEN_ROUTERS.register("expert_choice")
class ExpertChoiceTokenRouter(LinearScoreRouter):
    Config = ExpertChoiceConfig

    def route_tokens(self, x, real):
        c = self.config
        logits = self.scores(x)  # (N, E)
        probs, top, plain = softmax_top_k(logits, c.top_k)
        if not self.training:
            return logits, renormalise(top), plain, logits.new_zeros(())
        rows = real.nonzero().squeeze(1)  # (n,) real token rows
        per_expert = min(len(rows), capacity(len(rows), c.top_k, c.num_experts, c.capacity_factor))  # C
        chosen = probs[rows].topk(per_expert, dim=0).indices  # (C, E) each expert's best real tokens
        picked = torch.zeros_like(probs, dtype=torch.bool)
        picked[rows[chosen], torch.arange(c.num_experts, device=x.device).expand_as(chosen)] = True  # (N, E)
        slots = max(int(picked.sum(dim=1).max()), 1)  # m
        # chosen experts first (by probability), then the unchosen: (N, m)
        index = (picked.float() * 2 + probs.detach()).topk(slots, dim=-1).indices
        weights = torch.where(picked, probs, torch.zeros_like(probs)).gather(1, index)
        return logits, weights, index, logits.new_zeros(())
