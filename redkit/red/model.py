"""REDModel: the shared classifier C, K residual experts and a router as one nn.Module.

Axes: B batch, d hidden size, C classes, K experts.

    h (B, d) ──► experts ──► updates Δh (B, K, d) ─┐
             └─► router ───► α (B, K) ─────────────┴─► C(h + Σ_i α_i Δh_i) ──► logits (B, C)

The recipe (redkit.train.stages runs the same three parts on a run's cached features):

    "classifier"   C on the base subset                     red.part_loss("classifier", h, y)
    i = 0..K-1     expert i ALONE on domain i, through C    red.part_loss(i, h_i, y_i)       (C frozen)
    "router"       α supervised on the domain label         red.part_loss("router", h, domains=d)

`train_part(part)` freezes everything else and returns the part's parameters for an optimizer.
This is the one RED forward of redkit: the compositions (red, red_oracle, red_uniform, red_logit_experts),
the stages, bundles and the Python API all run it.
"""

from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.modules.layers import ROUTERS, Classifier
from redkit.modules.routing import RouterBase, RouterOutput
from redkit.red.config import REDConfig
from redkit.red.layer import ResidualExpert, mix, new_expert

Part = str | int  # "classifier", "router", "all", or an expert's index


class REDOutput(NamedTuple):
    logits: torch.Tensor  # (B, C)
    alpha: torch.Tensor  # (B, K) the weights the experts were mixed with
    updates: torch.Tensor  # (B, K, d) the experts' Δh (a logit-kind model: (B, K, C) Δz)
    aux_loss: torch.Tensor  # () the router's auxiliary loss (0 when α was given)


def router_loss(router: RouterBase, h: torch.Tensor, domains: torch.Tensor) -> torch.Tensor:
    """RED's router objective: cross-entropy of its logits against the domain label (B,), plus its
    own auxiliary loss (load balance...; 0 for the dense router)."""
    out = router.route(h)
    return F.cross_entropy(out.logits, domains) + out.aux_loss


def new_router(config: REDConfig) -> RouterBase:
    """A fresh `config.router` over K experts (a training-free one is filled in by its `from_run`)."""
    cls = ROUTERS[config.router]
    accepts = {f.name for f in fields(cls.Config)}
    hidden = {"hidden": config.router_hidden} if "hidden" in accepts else {}
    return cls(cls.Config(dim=config.dim, num_experts=config.num_experts, **hidden, **config.router_options))


class REDModel(nn.Module):
    def __init__(self, config: REDConfig, parts: tuple | None = None):
        """A fresh model from `config` (every expert zero-initialised: it is C alone until trained);
        `parts` = (classifier, experts, router or None) uses trained modules instead (`from_parts`)."""
        super().__init__()
        self.config = config
        if parts is None:
            parts = (
                Classifier(Classifier.Config(config.dim, config.num_classes)),
                [new_expert(config) for _ in config.domains],
                new_router(config),
            )
        classifier, experts, router = parts
        self.classifier = classifier
        self.experts = nn.ModuleList(experts)
        self.router = router  # None: a model whose router is not trained yet; α must be given
        self.training_part: Part = "all"
        self.card: dict = {}  # provenance and metrics, for the model card (from_run, from_pretrained)

    @classmethod
    def from_parts(
        cls,
        classifier: Classifier,
        experts: list[nn.Module],
        domains: tuple[str, ...],
        router: RouterBase | None = None,
        labels: tuple = (),
        pooling: str = "mean",
    ) -> "REDModel":
        """A model around trained modules (a run's, a bundle's): the config is read off them."""
        kind = "residual" if isinstance(experts[0], ResidualExpert) else "logit"
        options = dict(vars(router.config)) if router is not None else {}
        dims = {name: options.pop(name, None) for name in ("dim", "num_experts")}
        hidden = options.pop("hidden", 256)
        config = REDConfig(
            dim=classifier.config.dim,
            num_classes=classifier.config.num_classes,
            domains=domains,
            expert_rank=experts[0].config.rank if kind == "residual" else 0,
            expert_kind=kind,
            router=router.name if router is not None else "dense",
            router_hidden=hidden,
            router_options=options,
            labels=labels,
            pooling=pooling,
        )
        routed = dims["num_experts"] if router is not None else len(experts)
        if len(experts) != config.num_experts or routed != len(experts):
            raise RedkitError(
                f"{len(experts)} experts, {config.num_experts} domains and a router over {routed}: they must agree"
            )
        return cls(config, (classifier, experts, router))

    # ---- the forward, in pieces a composition can re-mix -----------------------------------------

    def route(self, h: torch.Tensor) -> RouterOutput:
        if self.router is None:
            raise RedkitError("this RED model has no router yet: pass alpha, or train one (part 'router')")
        return self.router.route(h)

    def expert_updates(self, h: torch.Tensor) -> torch.Tensor:
        """(B, d) -> (B, K, d) every expert's Δh_i (logit kind: (B, K, C) Δz_i)."""
        return torch.stack([expert(h) for expert in self.experts], dim=1)

    def expert_hidden(self, h: torch.Tensor, updates: torch.Tensor | None = None) -> torch.Tensor:
        """(B, d) -> (B, K, d) h + Δh_i: the hidden state each expert alone would give C."""
        if self.config.expert_kind != "residual":
            raise RedkitError("expert_hidden: a logit-kind model's experts do not act on h")
        return h.unsqueeze(1) + (self.expert_updates(h) if updates is None else updates)

    def mix(self, h: torch.Tensor, updates: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """(B, d), (B, K, ·), (B, K) -> logits (B, C) = C(h + Σ_i α_i Δh_i)."""
        return mix(self.config.expert_kind, self.classifier, h, updates, alpha)

    def forward(self, h: torch.Tensor, alpha: torch.Tensor | None = None) -> REDOutput:
        """Pooled features h (B, d) -> REDOutput; `alpha` (B, K) replaces the router's weights
        (the true domain one-hot: the oracle; 1/K: uniform)."""
        aux = h.new_zeros(())
        if alpha is None:
            routed = self.route(h)
            alpha, aux = routed.weights, routed.aux_loss
        updates = self.expert_updates(h)
        return REDOutput(self.mix(h, updates, alpha), alpha, updates, aux)

    def expert_alone_logits(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """(B, d) -> (B, C) what the model predicts with expert i alone: the loss it is trained on."""
        return self.experts[i].alone_logits(h, self.classifier)

    # ---- training, part by part ---------------------------------------------------------------

    def _part(self, part: Part) -> nn.Module:
        if part == "all":
            return self
        if part == "classifier":
            return self.classifier
        if part == "router" and self.router is not None:
            return self.router
        if isinstance(part, int) and 0 <= part < len(self.experts):
            return self.experts[part]
        raise RedkitError(
            f"unknown RED part {part!r}: expected 'classifier', 'router', 'all' or an expert 0..{len(self.experts) - 1}"
        )

    def train_part(self, part: Part) -> list[nn.Parameter]:
        """Freeze everything but `part` and return its parameters (for an optimizer)."""
        module = self._part(part)
        self.requires_grad_(False)
        module.requires_grad_(True)
        self.training_part = part
        return [p for p in module.parameters() if p.requires_grad]

    def part_loss(
        self, part: Part, h: torch.Tensor, labels: torch.Tensor | None = None, domains: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mean loss `part` is trained on: C on labels, expert i alone through C on labels (give it
        domain i's rows only), the router on domains, "all" the mixed prediction on labels."""
        self._part(part)
        needed = domains if part == "router" else labels
        if needed is None:
            raise RedkitError(f"part {part!r} is trained on {'domains' if part == 'router' else 'labels'}; none given")
        if part == "router":
            return router_loss(self.router, h, domains)
        if part == "classifier":
            return F.cross_entropy(self.classifier(h), labels)
        if part == "all":
            out = self(h)
            return F.cross_entropy(out.logits, labels) + out.aux_loss
        return F.cross_entropy(self.expert_alone_logits(part, h), labels)

    # ---- artifacts ------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path) -> Path:
        from redkit.red.pretrained import save_pretrained

        return save_pretrained(self, Path(directory))

    @classmethod
    def from_pretrained(cls, directory: str | Path, fingerprint: str | None = None) -> "REDModel":
        """A saved RED model; `fingerprint` refuses one trained on another backbone's features."""
        from redkit.red.pretrained import load_pretrained

        return load_pretrained(cls, Path(directory), fingerprint)
