"""Compositions: how trained modules are recombined into one predictor, chosen by name.

Each takes the module set, features h (N, d) and the true range labels (N,) (used only by the
oracle variants) and returns `Composed(probs (N, C), weights (N, K) or None)`.

    global_10pct  softmax(C(h))                              the weak global head of stage base
    global_full   softmax(G(h))                              a global head trained on all of train
    oracle        softmax(E_true(h))                         per-range heads, true range given
    uniform       (1/K) Σ softmax(E_i(h))                    parameter-free ensemble
    moe           Σ α_i softmax(E_i(h)),  α = gate(h)        classical softmax MoE
    red           softmax(C(h + Σ α_i Δh_i(h))), α = router  Residual Expert Decomposition
    red_oracle    RED with α = one-hot(true range)
    red_uniform   RED with α = 1/K ("AllFix")
    red_logits    softmax(C(h) + Σ α_i W_i h)                the original code's logit-space residual
"""

from typing import TYPE_CHECKING, Callable, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.store import load_module
from redkit.registry import Registry

if TYPE_CHECKING:
    from redkit.run import Run


class Composed(NamedTuple):
    probs: torch.Tensor  # (N, C)
    weights: torch.Tensor | None  # (N, K) expert weights, where the composition has any


class ModuleSet:
    """Every trained module of a run, loaded lazily (a composition loads only what it uses) and
    checked against the run's backbone fingerprint and width."""

    def __init__(self, run: "Run"):
        self.run = run
        self._loaded: dict[str, nn.Module] = {}

    def _load(self, *parts: str) -> nn.Module:
        key = "/".join(parts)
        if key not in self._loaded:
            run = self.run
            self._loaded[key] = load_module(run.module_dir(*parts), run.fingerprint, run.feature_dim)[0].to(run.device)
        return self._loaded[key]

    def classifier(self) -> nn.Module:
        return self._load("classifier")

    def experts(self, kind: str) -> list[nn.Module]:
        return [self._load("experts", kind, name) for name in self.run.space.domains]

    def heads(self) -> list[nn.Module]:
        return [self._load("heads", name) for name in self.run.space.domains]

    def global_head(self) -> nn.Module:
        return self._load("heads", "global_full")

    def router(self) -> nn.Module:
        return self._load("router")

    def gate(self) -> nn.Module:
        return self._load("gate")


COMPOSITIONS: Registry[Callable[[ModuleSet, torch.Tensor, torch.Tensor], Composed]] = Registry("composition")


def _one_hot(modules: "ModuleSet", labels: torch.Tensor) -> torch.Tensor:
    return F.one_hot(labels, modules.run.space.num_domains).float()


def _uniform(modules: "ModuleSet", h: torch.Tensor) -> torch.Tensor:
    k = modules.run.space.num_domains
    return torch.full((h.shape[0], k), 1.0 / k, device=h.device)


def _mix_heads(heads: list[nn.Module], h: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Σ_i α_i softmax(E_i(h)): (N, K) weights, K heads -> (N, C)."""
    probs = torch.stack([F.softmax(head(h), dim=-1) for head in heads], dim=1)  # (N, K, C)
    return (alpha.unsqueeze(-1) * probs).sum(dim=1)


def red_logits_of(modules: ModuleSet, h: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """RED: h_hat = h + Σ_i α_i Δh_i(h), logits = C(h_hat). (N, d), (N, K) -> (N, C)."""
    deltas = torch.stack([expert(h) for expert in modules.experts("residual")], dim=1)  # (N, K, d)
    return modules.classifier()(h + (alpha.unsqueeze(-1) * deltas).sum(dim=1))


def _red(alpha_of: Callable[[ModuleSet, torch.Tensor, torch.Tensor], torch.Tensor]):
    def compose(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
        alpha = alpha_of(modules, h, labels)
        return Composed(F.softmax(red_logits_of(modules, h, alpha), dim=-1), alpha)
    return compose


def _router_alpha(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.softmax(modules.router()(h), dim=-1)


COMPOSITIONS.register("global_10pct")(lambda m, h, y: Composed(F.softmax(m.classifier()(h), dim=-1), None))
COMPOSITIONS.register("global_full")(lambda m, h, y: Composed(F.softmax(m.global_head()(h), dim=-1), None))
COMPOSITIONS.register("oracle")(lambda m, h, y: Composed(_mix_heads(m.heads(), h, _one_hot(m, y)), _one_hot(m, y)))
COMPOSITIONS.register("uniform")(lambda m, h, y: Composed(_mix_heads(m.heads(), h, _uniform(m, h)), _uniform(m, h)))


@COMPOSITIONS.register("moe")
def moe(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    alpha = F.softmax(modules.gate()(h), dim=-1)
    return Composed(_mix_heads(modules.heads(), h, alpha), alpha)


COMPOSITIONS.register("red")(_red(_router_alpha))
COMPOSITIONS.register("red_oracle")(_red(lambda m, h, y: _one_hot(m, y)))
COMPOSITIONS.register("red_uniform")(_red(lambda m, h, y: _uniform(m, h)))


@COMPOSITIONS.register("red_logits")
def red_logits(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    alpha = _router_alpha(modules, h, labels)
    corrections = torch.stack([expert(h) for expert in modules.experts("logit")], dim=1)  # (N, K, C)
    logits = modules.classifier()(h) + (alpha.unsqueeze(-1) * corrections).sum(dim=1)
    return Composed(F.softmax(logits, dim=-1), alpha)


@torch.no_grad()
def compose(name: str, modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    return COMPOSITIONS[name](modules, h, labels)
