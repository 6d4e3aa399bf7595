"""RED's layer: the expert kinds, each with how its updates are mixed by weights α before the shared
classifier C (the one place that decides it).

Axes: B batch, d hidden size, r rank, C classes, K experts.

    residual   Δh_i = B_i σ(A_i h) (B, d)    logits = C(h + Σ_i α_i Δh_i)     RED (B_i = 0 at init)
    logit      Δz_i = W_i h        (B, C)    logits = C(h) + Σ_i α_i Δz_i     the original code's ablation

Both are zero-initialised, so an untrained expert changes nothing (peft's LoRA convention). What
the model predicts with one expert alone, the loss that expert is trained on, is its mix with α = 1.
Each kind is registered as a module kind (MODULES): a saved expert is rebuilt by its kind's name.
"""

from dataclasses import dataclass

import torch
from torch import nn

from redkit.modules.layers import MODULES, Classifier, ClassifierConfig
from redkit.red.config import REDConfig


def weighted(updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Σ_i α_i updates_i: (B, K, ·), (B, K) -> (B, ·)."""
    return (alpha.unsqueeze(-1) * updates).sum(dim=1)


@dataclass
class ResidualExpertConfig:
    dim: int
    rank: int  # r; d/4 by default


@MODULES.register("residual")
class ResidualExpert(nn.Module):
    """Δh = B σ(A h): a low-rank correction of the hidden state, before C."""

    Config = ResidualExpertConfig

    def __init__(self, config: ResidualExpertConfig):
        super().__init__()
        self.config = config
        self.down = nn.Linear(config.dim, config.rank)  # A: (d -> r)
        self.up = nn.Linear(config.rank, config.dim)  # B: (r -> d)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, d) -> Δh (B, d)
        return self.up(torch.nn.functional.gelu(self.down(h)))

    @staticmethod
    def mix(classifier: nn.Module, h: torch.Tensor, updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """(B, d), (B, K, d), (B, K) -> logits (B, C) = C(h + Σ_i α_i Δh_i)."""
        return classifier(h + weighted(updates, alpha))

    def alone_logits(self, h: torch.Tensor, classifier: nn.Module) -> torch.Tensor:
        return self.mix(classifier, h, self(h).unsqueeze(1), h.new_ones(len(h), 1))


@MODULES.register("logit")
class LogitExpert(Classifier):
    """Δz = W h: a correction of C's logits (the original code's expert)."""

    def __init__(self, config: ClassifierConfig):
        super().__init__(config)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    @staticmethod
    def mix(classifier: nn.Module, h: torch.Tensor, updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """(B, d), (B, K, C), (B, K) -> logits (B, C) = C(h) + Σ_i α_i Δz_i."""
        return classifier(h) + weighted(updates, alpha)

    def alone_logits(self, h: torch.Tensor, classifier: nn.Module) -> torch.Tensor:
        return self.mix(classifier, h, self(h).unsqueeze(1), h.new_ones(len(h), 1))


EXPERT_KINDS: dict[str, type[nn.Module]] = {"residual": ResidualExpert, "logit": LogitExpert}


def new_expert(config: REDConfig) -> nn.Module:
    """One fresh expert of `config.expert_kind`: zero-initialised output, so it changes nothing yet."""
    if config.expert_kind == "residual":
        return ResidualExpert(ResidualExpert.Config(dim=config.dim, rank=config.rank))
    return LogitExpert(LogitExpert.Config(dim=config.dim, num_classes=config.num_classes))


def mix(kind: str, classifier: nn.Module, h: torch.Tensor, updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The RED forward once experts of `kind` have run: (B, d), (B, K, ·), (B, K) -> logits (B, C)."""
    return EXPERT_KINDS[kind].mix(classifier, h, updates, alpha)
