"""The modules of RED and its baselines, all acting on pooled features h of shape (B, d).

Axes: B batch, d hidden size, C classes, K experts (one per domain).

    classifier     C(h) -> (B, C)                       shared, trained with the backbone in stage base
    label_rows     R(h) -> (B, C_new)                   a domain added later: its new labels' rows (modules/labels.py)
    (residual, logit: RED's experts, in redkit/red/layer.py, where how each mixes is decided too)
    head           E(h) -> (B, C)                        a full classifier: the baselines' expert
    router / gate  R(h) -> (B, K) logits                 2-layer MLP; router: domain-supervised, gate: task loss

A head (and a domain's label rows) can say what the model predicts with it alone (`alone_logits`):
that is the loss it is trained on, on its own domain, with everything else frozen.
"""

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from redkit.config_types import require_positive
from redkit.modules.routing import RouterBase, RouterOutput
from redkit.registry import Registry

# Filled by the packages that own the entries: the expert kinds by redkit.red, the router zoo by redkit.routers.
MODULES: Registry[type[nn.Module]] = Registry("module kind")
ROUTERS: Registry[type[RouterBase]] = Registry("router")  # `--router NAME`


@dataclass
class ClassifierConfig:
    dim: int
    num_classes: int


@MODULES.register("classifier")
class Classifier(nn.Module):
    Config = ClassifierConfig

    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.config = config
        with warnings.catch_warnings():  # C over no label (redkit/federated/plan.py) has nothing to initialise
            warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
            self.linear = nn.Linear(config.dim, config.num_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, d) -> (B, C)
        return self.linear(h)


@dataclass
class LabelRowsConfig:
    dim: int
    num_classes: int  # how many new labels
    labels: tuple[str, ...] = ()  # their names, in row order (checked against the run's on load)


@MODULES.register("label_rows")
class LabelRows(Classifier):
    """The rows a domain added later brings for the labels the shared classifier C has never
    seen: logits (B, C_new) on the same h + Δh as C's, trained with that domain's residual expert
    through the frozen C (redkit/lifecycle/new_labels.py)."""

    Config = LabelRowsConfig


@MODULES.register("head")
class HeadExpert(Classifier):
    """A full classifier of its own, E_i(h): the oracle / uniform / MoE baselines' expert, and the
    global head trained on all the data."""

    def alone_logits(self, h: torch.Tensor, classifier: Classifier | None = None) -> torch.Tensor:
        return self(h)


@dataclass
class RouterConfig:
    dim: int
    num_experts: int  # K
    hidden: int = 256
    temperature: float = 1.0  # α = softmax(logits / T): T > 1 mixes more where the router is unsure (chosen on val)

    def __post_init__(self):
        require_positive(self, "temperature")


@ROUTERS.register("dense")
@MODULES.register("router")
class Router(RouterBase):
    """Two-layer MLP h -> K expert logits; α = softmax of them (dense: every expert weighs in). The
    RED router and the MoE gate share this architecture and differ only in what they are trained on."""

    Config = RouterConfig
    name, kind = "dense", "router"

    def __init__(self, config: RouterConfig):
        super().__init__()
        self.config = config
        self.net = nn.Sequential(
            nn.Linear(config.dim, config.hidden), nn.GELU(), nn.Linear(config.hidden, config.num_experts)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, d) -> (B, K) logits
        return self.net(h)

    def route(self, h: torch.Tensor) -> RouterOutput:
        """Dense: the weights are the whole softmax (of logits / T); `selected` is the top-1 (what
        load metrics count). `logits` stay untempered: the domain loss is trained on them."""
        logits = self(h)
        probs = torch.nn.functional.softmax(logits / self.config.temperature, dim=-1)
        return RouterOutput(probs, probs.argmax(dim=-1, keepdim=True), probs, logits, logits.new_zeros(()))

    def log_weights(self, out: RouterOutput) -> torch.Tensor:
        """log softmax of the (tempered) logits: exact where log(softmax) would underflow."""
        return torch.nn.functional.log_softmax(out.logits / self.config.temperature, dim=-1)
