"""The base of every token router: it keeps transformers' gate contract.

Axes: N = B * T flattened tokens (padding included, as transformers passes them), E experts,
k experts per token (the model's num_experts_per_tok), d hidden size.

A transformers 5.x sparse-MoE block calls `self.gate(hidden (N, d))` and uses

    router_logits (N, E)   recorded by the model (OutputRecorder, index 0) for output_router_logits,
                           the load-balancing loss and redkit's RoutingMonitor
    top_k_weights (N, k)   combination weights (0 = the slot adds nothing)
    top_k_index   (N, k)   expert of each slot (always a real expert: transformers' grouped_mm
                           experts leave the "no expert" sentinel's rows uninitialised)

A token router returns exactly that from `forward`, and keeps its own auxiliary loss of the last
forward in `self.aux_loss` (`router_aux_loss(model)` sums them): the model's load-balancing loss
stays the model's, computed from the recorded logits as before.

Batch-level decisions (capacity, Sinkhorn, quotas, Expert Choice, the loss-free bias) see the
real tokens only (`context.real_tokens`); padding rows get their plain top-k, which their
(ignored) outputs may use.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.registry import Registry
from redkit_experiments.routing.token.context import RoutingContext

TOKEN_ROUTERS: Registry[type["TokenRouter"]] = Registry("token router")


@dataclass
class TokenRouterConfig:
    dim: int  # d
    num_experts: int  # E
    top_k: int = 2  # k slots per token, the model's num_experts_per_tok


class TokenRouter(nn.Module):
    Config = TokenRouterConfig
    # True: trained with the model's own (Switch-style) load-balancing loss, as stock Mixtral is;
    # routers that balance otherwise (their own loss, a bias, Sinkhorn, experts choosing) say False.
    uses_model_balance_loss = False

    def __init__(self, config: TokenRouterConfig):
        super().__init__()
        self.config = config
        self.context = RoutingContext()  # replaced by the model's shared one in replace_router
        self.aux_loss = torch.zeros(())
        self.layer = 0  # which MoE layer, in call order
        self._experts: tuple[nn.Module, ...] = ()  # the block's experts, not a submodule (not owned)

    def bind(self, context: RoutingContext, experts: nn.Module | None, layer: int) -> None:
        self.context, self.layer = context, layer
        self._experts = (experts,) if experts is not None else ()

    def take_over(self, stock: nn.Module) -> None:
        """Start from the gate being replaced where the parameters mean the same (default: no)."""

    def forward(self, hidden_states: torch.Tensor):
        x = hidden_states.reshape(-1, self.config.dim)  # (N, d)
        real = self.context.real_tokens(len(x), x.device)  # (N,)
        logits, weights, index, aux = self.route_tokens(x, real)
        self.aux_loss = aux
        return logits, weights, index

    def route_tokens(self, x: torch.Tensor, real: torch.Tensor):
        """(N, d), (N,) bool -> logits (N, E), weights (N, k), index (N, k), aux loss ()."""
        raise NotImplementedError


class LinearScoreRouter(TokenRouter):
    """A router whose logits are the stock gate's: x W^T with W (E, d), initialised as transformers
    initialises Mixtral's gate (N(0, 0.02)) and taken over from the replaced gate when it has one."""

    def __init__(self, config: TokenRouterConfig):
        super().__init__(config)
        self.weight = nn.Parameter(torch.randn(config.num_experts, config.dim) * 0.02)

    def take_over(self, stock: nn.Module) -> None:
        weight = getattr(stock, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.shape == self.weight.shape:
            with torch.no_grad():
                self.weight.copy_(weight)

    def scores(self, x: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, E) logits
        return F.linear(x, self.weight)


def fill_real(plain: torch.Tensor, real: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`plain` (N, ...) with its real rows replaced by `values` (n_real, ...)."""
    if bool(real.all()):
        return values
    out = plain.clone()
    out[real] = values.to(out.dtype)
    return out


def renormalise(gates: torch.Tensor) -> torch.Tensor:
    """(N, k) gates divided by their sum (a row of zeros stays zero)."""
    return gates / gates.sum(dim=-1, keepdim=True).clamp(min=1e-9)


def softmax_top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """probs (N, E) in float32, and their top-k values and indices (N, k)."""
    probs = F.softmax(logits.float(), dim=-1)
    top = probs.topk(k, dim=-1)
    return probs, top.values, top.indices


def router_aux_loss(model: nn.Module) -> torch.Tensor:
    """Σ of the token routers' own auxiliary losses of the model's last forward (0 if none)."""
    losses = [m.aux_loss for m in model.modules() if isinstance(m, TokenRouter)]
    return torch.stack([loss.float() for loss in losses]).sum() if losses else torch.zeros(())


def token_routers(model: nn.Module) -> list[TokenRouter]:
    return [m for m in model.modules() if isinstance(m, TokenRouter)]
