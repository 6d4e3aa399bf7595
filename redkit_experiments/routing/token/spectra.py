"""SPECTRA at token level: every component of the routing-quality protocol's router, each switchable for the ablation.

Axes: N = B * T tokens, E experts, R router dims per expert, H = E R, d hidden size.

    state     s = GRU(x) along the sequence (gru "sequence"/"both"), else s = W_s x         (N, H)
              across layers (gru "layers"/"both"): s = GRUCell(s, s_prev), s_prev the same token's
              state at the previous MoE layer
    express   v = W_e x, one R-dim expression per expert (expression=True),
              else v_i = p_i, one learned prototype per expert (orthogonal init)              (N, E, R)
    logits    z_i = scale · cos(s_i, v_i)  (s split into E blocks of R)                          (N, E)
    select    training with sinkhorn=True: top-k of Sinkhorn(z) over the real tokens, then a quota
              (each expert keeps its ⌈c n k / E⌉ best); otherwise top-k of softmax(z).
              Gates: softmax(z) at the selection, renormalised over the k
    aux loss  ortho_weight · mean off-diag cos² between the experts' expression maps (rows of W_e
              grouped per expert; the prototypes without expression)
              + speciality_weight · mean off-diag cos² between the experts' flattened weights

Decisions where the routing-quality protocol and the published code (ppijbb/llm_training, models/spectra_model.py and
its earlier models/(backup)gramspec_moe.py) are ambiguous, in docs/guides/design.md's style:

1. **GRU direction and causality.** The published router carries the GRU's final hidden state of a
   whole sequence into the next layer; in a causal language model that lets a token's routing see
   later tokens. Here the state is carried per token: along the sequence by a causal GRU, across
   layers by a GRUCell over the same token's previous-layer state. Padding never feeds the GRU:
   each sequence's real tokens are packed first, in order, run, and put back, so any padding
   side gives the real tokens the routing they get unpadded. Incremental decoding with a KV cache
   restarts the sequence state at each call (the routers keep no cache).
2. **Expression projector.** The published code's `(E R)`-wide linear map whose per-expert blocks
   are compared by cosine with the GRU's blocks (gramspec), not the later "intent cell" that
   replaced the GRU by mean pooling (it sees the whole sequence: non-causal). Without it each
   expert has one learned prototype (what redkit's pooled SPECTRA router does).
3. **Sinkhorn + quota.** Selection only (no gradient through the balancing), in training only, as
   the pooled router; inference is plain top-k so a token's routing does not depend on its batch.
4. **Orthogonality constraint** acts on the router's per-expert expression maps (or prototypes);
   the **speciality penalty** on the experts themselves: the squared cosine between two experts'
   flattened weights (published `calculate_ortho_loss_for_experts`), so that experts differ.
   The gate reaches the block's experts by reference (not a submodule: the block owns them).
5. **No Switch balancing loss.** Balance comes from Sinkhorn + quota; with `sinkhorn=False` the
   router has no balancing at all (that is the ablation).
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.routers.base import capacity
from redkit.routers.spectra import orthogonality_penalty, quota, sinkhorn
from redkit_experiments.routing.token.base import TOKEN_ROUTERS, TokenRouter, TokenRouterConfig, fill_real, renormalise

GRU_MODES = ("none", "sequence", "layers", "both")


@dataclass
class SpectraTokenConfig(TokenRouterConfig):
    router_dim: int = 16  # R
    expression: bool = True
    gru: str = "sequence"  # none | sequence | layers | both
    sinkhorn: bool = True  # Sinkhorn + quota selection in training
    sinkhorn_iters: int = 3
    capacity_factor: float = 1.25  # the quota ⌈c n k / E⌉
    scale: float = 10.0  # cosine -> logit
    ortho_weight: float = 1e-2
    speciality_weight: float = 1e-2

    def __post_init__(self) -> None:
        if self.gru not in GRU_MODES:
            raise RedkitError(f"spectra gru={self.gru!r}: expected one of {', '.join(GRU_MODES)}")
        if self.router_dim < 1:
            raise RedkitError(f"spectra router_dim={self.router_dim}: must be at least 1")


def packed_gru(gru: nn.GRU, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Run `gru` along each sequence's real tokens only. x (B, T, d), real (B, T) -> (B, T, H);
    padding rows get the state of the last real token before them (zeros before the first)."""
    # Stable order: real tokens first, in their order, then padding (whatever side it was on).
    order = (~real).to(torch.int8).argsort(dim=1, stable=True)  # (B, T)
    packed = x.gather(1, order.unsqueeze(-1).expand_as(x))
    out, _ = gru(packed)  # causal: a real token's state never sees the padding behind it
    return torch.empty_like(out).scatter_(1, order.unsqueeze(-1).expand_as(out), out)


def expert_weights(experts: nn.Module, num_experts: int) -> torch.Tensor | None:
    """(E, P) every expert's parameters flattened: 3-D parameter tensors with a leading E
    (transformers 5.x fused experts) or one submodule per expert (ModuleList)."""
    fused = [
        p.reshape(num_experts, -1)
        for p in experts.parameters(recurse=False)
        if p.dim() >= 2 and p.shape[0] == num_experts
    ]
    if fused:
        return torch.cat(fused, dim=1)
    if isinstance(experts, nn.ModuleList) and len(experts) == num_experts:
        return torch.stack([torch.cat([p.reshape(-1) for p in e.parameters()]) for e in experts])
    return None


@TOKEN_ROUTERS.register("spectra")
class SpectraTokenRouter(TokenRouter):
    Config = SpectraTokenConfig

    def __init__(self, config: SpectraTokenConfig):
        super().__init__(config)
        e, r, d = config.num_experts, config.router_dim, config.dim
        h = e * r
        if config.gru in ("sequence", "both"):
            self.sequence_gru = nn.GRU(d, h, batch_first=True, bias=False)
        else:
            self.state_proj = nn.Linear(d, h, bias=False)
        if config.gru in ("layers", "both"):
            self.layer_cell = nn.GRUCell(h, h, bias=False)
        if config.expression:
            self.expression = nn.Linear(d, h, bias=False)
            nn.init.orthogonal_(self.expression.weight)
        else:
            self.prototypes = nn.Parameter(torch.empty(e, r))
            nn.init.orthogonal_(self.prototypes)

    # --- the components, in order (each is timed on its own in the overhead table) ---
    def state(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, H) routing state along the sequence (GRU) or of the token alone."""
        if not hasattr(self, "sequence_gru"):
            return self.state_proj(x)
        b, t = self.context.batch_shape(len(x))
        return packed_gru(self.sequence_gru, x.reshape(b, t, -1), real.reshape(b, t)).reshape(len(x), -1)

    def carry_across_layers(self, s: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "layer_cell"):
            return s
        previous = self.context.layer_state  # None at the first MoE layer: the trajectory starts at 0
        s = self.layer_cell(s, previous if previous is not None and previous.shape == s.shape else None)
        self.context.layer_state = s
        return s

    def expressions(self, x: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, E, R) or (1, E, R) prototypes."""
        c = self.config
        if c.expression:
            return self.expression(x).reshape(len(x), c.num_experts, c.router_dim)
        return self.prototypes.unsqueeze(0)

    def cosine_logits(self, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        c = self.config
        s = F.normalize(s.reshape(len(s), c.num_experts, c.router_dim), dim=-1)
        return c.scale * (s * F.normalize(v, dim=-1)).sum(dim=-1)  # (N, E)

    def select(self, logits: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> weights (N, k), index (N, k)."""
        c = self.config
        probs = F.softmax(logits.float(), dim=-1)
        top = probs.topk(c.top_k, dim=-1)
        if not (self.training and c.sinkhorn) or not bool(real.any()):
            return renormalise(top.values), top.indices
        with torch.no_grad():
            balanced = sinkhorn(logits[real].float(), c.sinkhorn_iters)  # (n, E)
            selected = balanced.topk(c.top_k, dim=-1).indices
            keep = quota(balanced, selected, capacity(len(balanced), c.top_k, c.num_experts, c.capacity_factor))
        gates = renormalise(probs[real].gather(1, selected) * keep)
        return fill_real(renormalise(top.values), real, gates), fill_real(top.indices, real, selected)

    def orthogonality(self) -> torch.Tensor:
        c = self.config
        maps = self.expression.weight.reshape(c.num_experts, -1) if c.expression else self.prototypes
        return orthogonality_penalty(maps)

    def speciality(self) -> torch.Tensor | None:
        weights = expert_weights(self._experts[0], self.config.num_experts) if self._experts else None
        return orthogonality_penalty(weights) if weights is not None else None

    def route_tokens(self, x, real):
        c = self.config
        s = self.carry_across_layers(self.state(x, real))
        logits = self.cosine_logits(s, self.expressions(x))
        weights, index = self.select(logits, real)
        aux = logits.new_zeros(())
        if c.ortho_weight:
            aux = aux + c.ortho_weight * self.orthogonality()
        if c.speciality_weight:
            penalty = self.speciality()
            aux = aux + c.speciality_weight * penalty if penalty is not None else aux
        return logits, weights, index, aux
