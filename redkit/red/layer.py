"""RED's layer: K expert updates of h, and how weights α combine them before the shared classifier C.

Axes: B batch, d hidden size, C classes, K experts.

    residual   Δh_i = B_i σ(A_i h) (B, d)    logits = C(h + Σ_i α_i Δh_i)     RED (B_i = 0 at init)
    logit      Δz_i = W_i h        (B, C)    logits = C(h) + Σ_i α_i Δz_i     the original code's ablation

The expert modules themselves live in redkit.modules.layers (their saved kind, "residual" or
"logit", rebuilds them from a run's modules/ directory); this file is the one place that mixes them.
"""

import torch
from torch import nn

from redkit.modules.layers import Classifier, LogitExpert, ResidualExpert  # noqa: F401  (RED's parts)
from redkit.red.config import REDConfig


def new_expert(config: REDConfig) -> nn.Module:
    """One fresh expert of `config.expert_kind`: zero-initialised output, so it changes nothing yet."""
    if config.expert_kind == "residual":
        return ResidualExpert(ResidualExpert.Config(dim=config.dim, rank=config.rank))
    return LogitExpert(LogitExpert.Config(dim=config.dim, num_classes=config.num_classes))


def weighted(updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Σ_i α_i updates_i: (B, K, ·), (B, K) -> (B, ·)."""
    return (alpha.unsqueeze(-1) * updates).sum(dim=1)


def mix(kind: str, classifier: nn.Module, h: torch.Tensor, updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The RED forward once experts have run: (B, d), (B, K, ·), (B, K) -> logits (B, C)."""
    if kind == "residual":
        return classifier(h + weighted(updates, alpha))
    return classifier(h) + weighted(updates, alpha)
