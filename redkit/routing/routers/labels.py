"""A router read off the label structure: where every label belongs to one domain, a classifier
over all labels already says which domain an input is from,

    α_d(h) = Σ_{y ∈ D_d} softmax(G(h) / T)_y          (the domain marginal of G's label distribution)

with G a head the run has already trained: `global_full` (a head on all of train, over the base's
features; the default) or `classifier` (stage base's C). Nothing is trained: it is built from the
run (`from_run`) as the prototype and arrow routers are, and it copies G's weights so that the saved
router is self-contained. α is soft (the full domain marginal), so that with `red_within`
(p(y) = α_{d(y)} p_{d(y)}(y)) an uncertain domain keeps both candidates; `selected` is its top domain.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.routing.routers.base import RouterOutput, register_router

SOURCES = ("global_full", "classifier")


@dataclass
class LabelRouterConfig:
    dim: int
    num_experts: int  # K
    num_classes: int = 0  # C of the head it reads
    source: str = "global_full"  # SOURCES: which of the run's heads gives the label distribution
    temperature: float = 1.0  # T: > 1 flattens α, < 1 sharpens it


@register_router("labels")
class LabelRouter(nn.Module):
    Config = LabelRouterConfig
    training_free = True

    def __init__(self, config: LabelRouterConfig):
        super().__init__()
        self.config = config
        self.head = nn.Linear(config.dim, config.num_classes)  # G, copied from the run's head
        self.register_buffer("membership", torch.zeros(config.num_experts, config.num_classes))  # (K, C) 0/1

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K) log α
        log_p = F.log_softmax(self.head(h) / self.config.temperature, dim=-1)  # (N, C)
        log_member = torch.log(self.membership)  # (K, C): 0 inside a domain, -inf outside
        return torch.logsumexp(log_p.unsqueeze(1) + log_member.unsqueeze(0), dim=-1)

    def route(self, h: torch.Tensor) -> RouterOutput:
        logits = self(h)
        probs = logits.exp()  # already normalised: the domain marginals sum to 1
        return RouterOutput(probs, probs.argmax(dim=-1, keepdim=True), probs, logits, logits.new_zeros(()))

    @classmethod
    def from_run(cls, run, role: str, source: str = "global_full", temperature: float = 1.0) -> "LabelRouter":
        from redkit.compositions import ModuleSet

        if source not in SOURCES:
            raise RedkitError(f"label router source {source!r} is not one of: {', '.join(SOURCES)}")
        modules = ModuleSet(run)
        head = modules.global_head() if source == "global_full" else modules.classifier()
        mask = run.space.domain_mask()  # (K, C); a RedkitError where labels are shared among domains
        router = cls(LabelRouterConfig(dim=run.feature_dim, num_experts=run.space.num_domains,
                                       num_classes=run.space.num_classes, source=source, temperature=temperature))
        router.head.load_state_dict(head.linear.state_dict())
        router.membership.copy_(mask.float())
        return router.requires_grad_(False).eval()
