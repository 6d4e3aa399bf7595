"""The modules of RED and its baselines, all acting on pooled features h of shape (B, d).

Axes: B batch, d hidden size, r expert rank, C classes (99 answers), K experts (5 ranges).

    classifier     C(h) -> (B, C)                       shared, trained with the backbone in stage base
    label_rows     R(h) -> (B, C_new)                   a domain added later: its new labels' rows (modules/labels.py)
    residual       Δh = B σ(A h) -> (B, d)               RED's expert: a low-rank hidden-space correction
    logit          Δz = W h -> (B, C)                    the original code's expert: a correction of logits
    head           E(h) -> (B, C)                        a full classifier: the baselines' expert
    router / gate  R(h) -> (B, K) logits                 2-layer MLP; router: domain-supervised, gate: task loss

Every expert can say what the model predicts with it alone (`alone_logits`): that is the loss it
is trained on, on its own domain, with everything else frozen.
"""

from dataclasses import dataclass

import torch
from torch import nn

from redkit.modules.routing import RouterBase, RouterOutput
from redkit.registry import Registry

ROUTER_PLUGINS = ("redkit.routing.routers",)  # the router zoo registers its routers (and their module kinds) there
MODULES: Registry[type[nn.Module]] = Registry("module kind", plugins=ROUTER_PLUGINS)
ROUTERS: Registry[type[RouterBase]] = Registry("router", plugins=ROUTER_PLUGINS)  # `--router NAME`


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


@dataclass
class ResidualExpertConfig:
    dim: int
    rank: int  # r; DESIGN default d/4


@MODULES.register("residual")
class ResidualExpert(nn.Module):
    """Δh = B σ(A h). B starts at zero, so an untrained expert is exactly the identity (peft's LoRA
    convention): plugging it in changes nothing until it has learned something."""

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

    def alone_logits(self, h: torch.Tensor, classifier: Classifier) -> torch.Tensor:
        return classifier(h + self(h))


@MODULES.register("logit")
class LogitExpert(Classifier):
    """The original code's expert: logits = C(h) + W h, a correction in logit space (B, C).
    Zero-initialised, like the residual one, so that an untrained expert changes nothing."""

    def __init__(self, config: ClassifierConfig):
        super().__init__(config)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def alone_logits(self, h: torch.Tensor, classifier: Classifier) -> torch.Tensor:
        return classifier(h) + self(h)


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
        self.net = nn.Sequential(nn.Linear(config.dim, config.hidden), nn.GELU(), nn.Linear(config.hidden, config.num_experts))

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
