"""A router read off the label structure: where every label belongs to one domain, a classifier
over all labels already says which domain an input is from,

    α_d(h) = Σ_{y ∈ D_d} softmax(G(h) / T)_y          (the domain marginal of G's label distribution)

with G a head the run has already trained: `global_head` (a head on all of train, over the base's
features; the default) or `classifier` (stage base's C). Nothing is trained: it is built from the
run (`from_run`) as the prototype and arrow routers are, and it copies G's weights so that the saved
router is self-contained. α is soft (the full domain marginal), so that with `red_per_domain`
(p(y) = α_{d(y)} p_{d(y)}(y)) an uncertain domain keeps both candidates; `selected` is its top domain.

`dense_labels` is a trained router that reads G's label distribution as well as h (the "refined
experts" of hierarchical classification, Bennett & Nguyen 2009: a node's classifier sees the flat
classifier's predictions): a two-layer MLP over [h, log softmax(G(h))], trained like the dense
router. It needs no label structure, so it also routes where domains share labels.
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.config_types import require_positive
from redkit.errors import RedkitError
from redkit.routers.base import RouterBase, RouterOutput, register_router

SOURCES = ("global_head", "classifier")
OLD_SOURCES = {"global_full": "global_head"}  # a config written before the rename


@dataclass
class LabelRouterConfig:
    dim: int
    num_experts: int  # K
    num_classes: int = 0  # C of the head it reads
    source: str = "global_head"  # SOURCES: which of the run's heads gives the label distribution
    temperature: float = 1.0  # T: > 1 flattens α, < 1 sharpens it

    def __post_init__(self):
        require_positive(self, "temperature")


@register_router("labels")
class LabelRouter(RouterBase):
    Config = LabelRouterConfig
    training_free = True

    def __init__(self, config: LabelRouterConfig):
        super().__init__()
        self.config = config
        self.head = torch.nn.Linear(config.dim, config.num_classes)  # G, copied from the run's head
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
    def from_run(cls, run, role: str, source: str = "global_head", temperature: float = 1.0) -> "LabelRouter":
        mask = run.space.domain_mask()  # (K, C); a RedkitError where labels are shared among domains
        router = cls(
            LabelRouterConfig(
                dim=run.feature_dim,
                num_experts=run.space.num_domains,
                num_classes=run.space.num_classes,
                source=source,
                temperature=temperature,
            )
        )
        router.head.load_state_dict(global_head_weights(run, source))
        router.membership.copy_(mask.float())
        return router.requires_grad_(False).eval()


def global_head_weights(run, source: str) -> dict[str, torch.Tensor]:
    """The state of the run's head G that a label-reading router copies: the global head on all of
    train (`global_head`) or stage base's classifier C (`classifier`)."""
    from redkit.compositions import ModuleSet

    source = OLD_SOURCES.get(source, source)
    if source not in SOURCES:
        raise RedkitError(f"label router source {source!r} is not one of: {', '.join(SOURCES)}")
    modules = ModuleSet(run)
    head = modules.global_head() if source == "global_head" else modules.classifier()
    return head.linear.state_dict()


@dataclass
class DenseLabelsConfig:
    dim: int
    num_experts: int  # K
    num_classes: int = 0  # C of the head it reads
    hidden: int = 256
    source: str = "global_head"  # SOURCES: which head's label distribution it reads
    temperature: float = 1.0  # α = softmax(logits / T)

    def __post_init__(self):
        require_positive(self, "temperature")


@register_router("dense_labels")
class DenseLabelsRouter(RouterBase):
    """α = softmax(MLP([h, log softmax(G(h))]) / T): the dense router, reading G's label distribution
    too. G is a frozen copy (not trained with the router)."""

    Config = DenseLabelsConfig

    def __init__(self, config: DenseLabelsConfig):
        super().__init__()
        self.config = config
        self.head = torch.nn.Linear(config.dim, config.num_classes).requires_grad_(False)  # G, copied from the run
        self.net = torch.nn.Sequential(
            torch.nn.Linear(config.dim + config.num_classes, config.hidden),
            torch.nn.GELU(),
            torch.nn.Linear(config.hidden, config.num_experts),
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K) logits
        return self.net(torch.cat([h, F.log_softmax(self.head(h), dim=-1)], dim=-1))

    def route(self, h: torch.Tensor) -> RouterOutput:
        logits = self(h)
        probs = F.softmax(logits / self.config.temperature, dim=-1)
        return RouterOutput(probs, probs.argmax(dim=-1, keepdim=True), probs, logits, logits.new_zeros(()))

    def log_weights(self, out: RouterOutput) -> torch.Tensor:
        return F.log_softmax(out.logits / self.config.temperature, dim=-1)

    def train(self, mode: bool = True) -> "DenseLabelsRouter":
        super().train(mode)
        self.head.eval()  # G stays as it was trained
        return self

    @classmethod
    def build(cls, run, role: str, **options) -> "DenseLabelsRouter":
        router = cls(
            DenseLabelsConfig(
                dim=run.feature_dim, num_experts=run.space.num_domains, num_classes=run.space.num_classes, **options
            )
        )
        router.head.load_state_dict(global_head_weights(run, router.config.source))
        return router
