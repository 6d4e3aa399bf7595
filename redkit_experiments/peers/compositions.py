"""Compositions over the K LoRA experts, each a forward pass through the adapted top layers.

    lora_oracle        expert of the true domain, per example (peft's `adapter_names=`)
    lora_red           Σ_i α_i ΔW_i in every layer, α = RED's router's weights on h, the run's pooled feature
    lora_uniform       Σ_i (1/K) ΔW_i in every layer
    lora_merge_linear  one adapter, peft's add_weighted_adapter(combination_type="linear", weights 1/K)
    lora_merge_ties    one adapter, peft's add_weighted_adapter(combination_type="ties", weights 1, density 0.5)
    lora_arrow         peft's Arrow: training-free token-level routing by the experts' prototypes
    lora_xlora         peft's X-LoRA: per-token scalings from a classifier trained on the task loss

Each is `fn(experts, batch, h, labels) -> Composed(probs (B, C), weights (B, K) or None)`, where
batch = (ids, mask, prefix states) of B texts, h (B, d) their pooled features (the router's input)
and labels (B,) their true domains (only the oracle reads them).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch.nn import functional as F

from redkit.compositions import Composed, ModuleSet, one_hot_alpha, router_alpha, uniform_alpha
from redkit.errors import RedkitError
from redkit.registry import Registry
from redkit_experiments.peers.arrow import ArrowRouting, ArrowSettings, arrow_backbone
from redkit_experiments.peers.lora import LoraBackbone
from redkit_experiments.peers.mixing import mixed_experts
from redkit_experiments.peers.xlora import xlora_weights

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # ids (B, T), mask (B, T), prefix states (B, T, d)


@dataclass
class MergeSettings:
    ties_density: float = 0.5  # fraction of each expert's largest-magnitude entries TIES keeps
    ties_weight: float = 1.0  # per expert; TIES averages the sign-agreeing entries itself
    # linear: weight 1/K per expert (peft scales A and B by sqrt(w s) each, so cross terms B_i A_j remain)


class LoraExperts:
    """The run's K LoRA experts (already in `main`) and what their compositions need, built lazily:
    the merged adapters, and the Arrow model (a second copy of the backbone)."""

    def __init__(
        self,
        run,
        main: LoraBackbone,
        directories: list[Path],
        modules: ModuleSet,
        arrow: ArrowSettings,
        merge: MergeSettings,
    ):
        self.run, self.main, self.directories, self.modules = run, main, directories, modules
        self.names = list(run.space.domains)
        self.arrow_settings, self.merge_settings = arrow, merge
        self._arrow: tuple[LoraBackbone, ArrowRouting] | None = None
        self.xlora: LoraBackbone | None = None  # set once X-LoRA is loaded and its classifier trained

    def probs(self, h: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.modules.classifier()(h), dim=-1)

    def merged(self, combination: str) -> str:
        """The name of the adapter merging all K experts by `combination` (linear | ties), made once."""
        name = f"merge_{combination}"
        if name not in self.main.adapters:
            k, s = len(self.names), self.merge_settings
            kwargs = (
                {"weights": [1.0 / k] * k}
                if combination == "linear"
                else {"weights": [s.ties_weight] * k, "density": s.ties_density}
            )
            try:
                self.main.peft.add_weighted_adapter(
                    self.names, adapter_name=name, combination_type=combination, **kwargs
                )
            except ValueError as err:
                raise RedkitError(f"lora_merge_{combination}: {str(err).splitlines()[0]}") from None
            self.main.peft.eval()
        return name

    def arrow(self) -> tuple[LoraBackbone, ArrowRouting]:
        if self._arrow is None:
            lb = arrow_backbone(self.run, self.directories, self.arrow_settings)
            self._arrow = (lb, ArrowRouting(lb.peft))
        return self._arrow


class LoraComposition(NamedTuple):
    fn: Callable[[LoraExperts, Batch, torch.Tensor, torch.Tensor], Composed]
    routed: bool  # its weights are a routing decision (scored against the true domain)
    uses_router: bool = False  # needs the pooled feature first (a base pass through the top layers)
    prepare: Callable[[LoraExperts], object] | None = None  # one-off work before inference (a merge, Arrow's model)


LORA_COMPOSITIONS: Registry[LoraComposition] = Registry("LoRA composition")


def _oracle(e: LoraExperts, batch: Batch, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    names = [e.names[k] for k in labels.tolist()]
    return Composed(e.probs(e.main.features(batch, adapter_names=names)), one_hot_alpha(labels, len(e.names)))


def _mixed(alpha_of: Callable[[LoraExperts, torch.Tensor], torch.Tensor]):
    def fn(e: LoraExperts, batch: Batch, h: torch.Tensor, labels: torch.Tensor) -> Composed:
        alpha = alpha_of(e, h)  # (B, K)
        with mixed_experts(e.main.peft, e.names, alpha):
            return Composed(e.probs(e.main.features(batch)), alpha)

    return fn


def _merge(combination: str):
    def fn(e: LoraExperts, batch: Batch, h: torch.Tensor, labels: torch.Tensor) -> Composed:
        name = e.merged(combination)
        return Composed(e.probs(e.main.features(batch, adapter_names=[name] * len(h))), None)

    return fn


def _arrow(e: LoraExperts, batch: Batch, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    lb, routing = e.arrow()
    recorded: list[torch.Tensor] = []
    with routing.record(batch[1], recorded):
        probs = e.probs(lb.features(batch))
    return Composed(probs, recorded[0])


def _xlora(e: LoraExperts, batch: Batch, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    if e.xlora is None:
        raise RedkitError("lora_xlora: X-LoRA is not loaded on this backbone (see the X-LoRA note of the results)")
    probs = e.probs(e.xlora.features(batch))
    return Composed(probs, xlora_weights(e.xlora, batch[1]))


LORA_COMPOSITIONS.register("lora_oracle")(LoraComposition(_oracle, routed=False))
LORA_COMPOSITIONS.register("lora_red")(
    LoraComposition(_mixed(lambda e, h: router_alpha(e.modules, "router", h)), routed=True, uses_router=True)
)
LORA_COMPOSITIONS.register("lora_uniform")(
    LoraComposition(_mixed(lambda e, h: uniform_alpha(len(h), len(e.names), h.device)), routed=False)
)
LORA_COMPOSITIONS.register("lora_merge_linear")(
    LoraComposition(_merge("linear"), routed=False, prepare=lambda e: e.merged("linear"))
)
LORA_COMPOSITIONS.register("lora_merge_ties")(
    LoraComposition(_merge("ties"), routed=False, prepare=lambda e: e.merged("ties"))
)
LORA_COMPOSITIONS.register("lora_arrow")(LoraComposition(_arrow, routed=True, prepare=lambda e: e.arrow()))
LORA_COMPOSITIONS.register("lora_xlora")(LoraComposition(_xlora, routed=True))


@torch.no_grad()
def lora_compose(name: str, experts: LoraExperts, batch: Batch, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    return LORA_COMPOSITIONS[name].fn(experts, batch, h, labels)
