"""`redkit study noise`: how each routed composition's accuracy falls as its routing gets worse.

For every routed composition (red, moe, red_logit_experts: `compositions.ROUTED`) the experts run once on
the split's cached features; then, for every noise model of `noise_models.py`, every level and
every draw, α is perturbed and only the cheap mixing step is redone. The draws of a level share
their random numbers across compositions (common random numbers), so two compositions are
compared on the very same corrupted routings.

Per composition and level: the accuracy's mean and 95% Student-t interval over the draws; per
composition and model: the area under the accuracy curve divided by the level span (its mean
height, a single robustness score). The reference points of each composition's experts: α from
the router as trained, α = one-hot(true domain) (oracle) and α = 1/K (uniform).
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from redkit.compositions import (
    MIXTURES,
    NEEDS_LABEL_DOMAINS,
    ROUTED,
    AlphaNoise,
    ModuleSet,
    one_hot_alpha,
    router_logits,
    uniform_alpha,
)
from redkit.errors import RedkitError
from redkit.modules.store import module_exists
from redkit.threads import one_thread
from redkit_experiments.steps.run import StepsRun
from redkit_experiments.study.noise_models import NOISE_MODELS
from redkit_experiments.study.noise_steps import executed_accuracy
from redkit_experiments.study.stats import area_under, t_interval


@dataclass
class NoiseStudyConfig:
    compositions: tuple[str, ...] = ()  # () = every routed composition whose modules the run has
    models: tuple[str, ...] = tuple(NOISE_MODELS)
    levels: tuple[float, ...] = ()  # () = each model's default grid; else these (one model only)
    draws: int = 20
    split: str = "test"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in self.models:
            model = NOISE_MODELS[name]  # an unknown name fails here, naming the known ones
            for level in self.levels:
                model.check(level)
        for name in self.compositions:
            ROUTED[name]
        if self.levels and len(self.models) != 1:
            raise RedkitError("--level applies to one noise model: name it with --model")
        if self.draws < 2:
            raise RedkitError(f"--draws must be at least 2 for an interval, not {self.draws}")

    def levels_of(self, model: str) -> tuple[float, ...]:
        return tuple(sorted(self.levels)) if self.levels else NOISE_MODELS[model].levels


def _has_modules(modules: ModuleSet, name: str) -> bool:
    """Whether the run has what routed composition `name` needs (a digits run trained with
    `--run red` has no heads and no gate, so no moe)."""
    routed, run = ROUTED[name], modules.run
    if name in NEEDS_LABEL_DOMAINS and not run.space.class_domains:  # labels shared among domains: no red_per_domain
        return False
    parts = {
        "heads": ("heads",),
        "residual": ("experts", "residual"),
        "logit": ("experts", "logit"),
        "within": ("experts", "residual"),
        "residual_outputs": ("experts", "residual"),
    }[routed.mixture]
    return module_exists(run.module_dir(routed.router)) and all(
        module_exists(run.module_dir(*parts, domain)) for domain in run.space.domains
    )


def _draw_seed(seed: int, model: str, level_index: int, draw: int) -> int:
    """A seed per (model, level, draw), independent of the composition (common random numbers)."""
    return seed * 1_000_003 + list(NOISE_MODELS).index(model) * 10_007 + level_index * 101 + draw


# The reference points of a composition's experts, as α functions of (router logits z, true domains y).
REFERENCES: dict[str, AlphaNoise] = {
    "router": lambda z, y: F.softmax(z, dim=-1),
    "oracle": lambda z, y: one_hot_alpha(y, z.shape[-1]),
    "uniform": lambda z, y: uniform_alpha(z.shape[0], z.shape[-1], z.device),
}


def sweep(names: list[str], config: NoiseStudyConfig, accuracy: Callable[[str, AlphaNoise], float], desc: str) -> dict:
    """{name: {"reference": {...}, "models": {model: {"levels", "accuracy", "auc"}}}}, where
    `accuracy(name, alpha_of)` scores composition `name` with α = alpha_of(router logits, true domains)."""
    out = {}
    bar = tqdm(
        total=len(names) * sum(len(config.levels_of(m)) for m in config.models),
        desc=desc,
        unit="level",
        leave=False,
        dynamic_ncols=True,
    )
    with bar:
        for name in names:
            result = {
                "router": ROUTED[name].router,
                "mixture": ROUTED[name].mixture,
                "reference": {ref: accuracy(name, alpha_of) for ref, alpha_of in REFERENCES.items()},
                "models": {},
            }
            for model_name in config.models:
                model, levels = NOISE_MODELS[model_name], config.levels_of(model_name)
                per_level = []
                for index, level in enumerate(levels):
                    draws = []
                    for draw in range(config.draws):
                        gen = torch.Generator().manual_seed(_draw_seed(config.seed, model_name, index, draw))
                        draws.append(accuracy(name, lambda z, y: model.perturb(z, y, level, gen)))
                    per_level.append(t_interval(draws) | {"draws": draws})
                    bar.update(1)
                result["models"][model_name] = {
                    "levels": list(levels),
                    "accuracy": per_level,
                    "auc": area_under(levels, [a["mean"] for a in per_level]),
                }
            out[name] = result
    return out


class FeatureAccuracy:
    """`accuracy(name, alpha_of)` on one split's cached features: each composition's experts and
    router run once (cached here); every α after that costs one mixing step."""

    def __init__(self, modules: ModuleSet, h: torch.Tensor, classes: torch.Tensor, domains: torch.Tensor):
        self.modules, self.h, self.classes, self.domains = modules, h, classes, domains
        self._ran: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, name: str, alpha_of: AlphaNoise) -> float:
        routed = ROUTED[name]
        mixture = MIXTURES[routed.mixture]
        if name not in self._ran:  # (N, K, ·) expert outputs, (N, K) router logits
            self._ran[name] = (
                mixture.outputs(self.modules, self.h),
                router_logits(self.modules, routed.router, self.h),
            )
        outputs, logits = self._ran[name]
        probs = mixture.mix(self.modules, self.h, outputs, alpha_of(logits, self.domains))
        return float((probs.argmax(dim=-1) == self.classes).float().mean())


def routed_names(modules: ModuleSet, asked: tuple[str, ...]) -> list[str]:
    """The compositions asked for (each must have its modules), or every routed one the run has."""
    run = modules.run
    if asked:
        for name in asked:
            if not _has_modules(modules, name):
                raise RedkitError(
                    f"{run.dir}: composition {name} needs a trained {ROUTED[name].router} and "
                    f"{ROUTED[name].mixture} experts; this run lacks some (run their stages first)"
                )
        return list(asked)
    names = [name for name in ROUTED if _has_modules(modules, name)]
    if not names:
        raise RedkitError(f"{run.dir}: no routed composition has all its modules (router or gate, and experts)")
    return names


@torch.no_grad()
def noise_study(run, config: NoiseStudyConfig) -> dict:
    """The sweep on `config.split`'s cached features; on a steps run, also on the executed
    decomposer test programs (gold programs, so that only the routing is wrong), where the noise
    hits every step and a wrong intermediate value feeds the next step."""
    start = time.perf_counter()
    modules = ModuleSet(run)
    names = routed_names(modules, config.compositions)
    if config.split not in run.splits:
        raise RedkitError(f"--split {config.split}: this run has no such split (it has {', '.join(run.splits)})")
    h, classes, domains = (t.to(run.device) for t in run.split_tensors(config.split))
    with one_thread():  # mixing (N, K, ·): many small ops, where thread hand-offs cost more than they save
        result = {
            "study": "noise",
            "split": config.split,
            "n": int(len(classes)),
            "config": asdict(config),
            "compositions": sweep(names, config, FeatureAccuracy(modules, h, classes, domains), "noise"),
        }
    if isinstance(run, StepsRun):  # all threads: a wrong intermediate value may need a new step encoded
        accuracy, n = executed_accuracy(run, modules)
        result["executed"] = {"n": n, "compositions": sweep(names, config, accuracy, "noise, executed")}
    return result | {"seconds": time.perf_counter() - start}


def levels_table(result: dict, model: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one noise model: a row per level, a column per composition ("mean
    [low, high]"), then the robustness score (area) and the reference points. `result` is a
    study's result or its "executed" part (both have "compositions")."""
    names = list(result["compositions"])
    first = result["compositions"][names[0]]["models"][model]
    symbol = NOISE_MODELS[model].symbol
    rows = []
    for index, level in enumerate(first["levels"]):
        row = [f"{symbol} = {level:g}"]
        for name in names:
            a = result["compositions"][name]["models"][model]["accuracy"][index]
            row.append(f"{a['mean']:.4f} [{a['low']:.4f}, {a['high']:.4f}]")
        rows.append(row)
    rows.append(["area (robustness)"] + [f"**{result['compositions'][n]['models'][model]['auc']:.4f}**" for n in names])
    for ref in ("oracle", "uniform"):
        rows.append([f"{ref} α (reference)"] + [f"{result['compositions'][n]['reference'][ref]:.4f}" for n in names])
    return ["level"] + names, rows


def robustness_table(result: dict) -> tuple[list[str], list[list[str]]]:
    """One row per composition: clean accuracy and the area under each model's curve."""
    names = list(result["compositions"])
    models = list(result["compositions"][names[0]]["models"])
    rows = [
        [name, f"{result['compositions'][name]['reference']['router']:.4f}"]
        + [f"{result['compositions'][name]['models'][m]['auc']:.4f}" for m in models]
        for name in names
    ]
    return ["composition", "clean"] + [f"{m} area" for m in models], rows


def curve(result: dict, model: str, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(levels, mean, low, high) of one composition under one model, for plotting."""
    m = result["compositions"][name]["models"][model]
    acc = m["accuracy"]
    return (
        np.array(m["levels"]),
        np.array([a["mean"] for a in acc]),
        np.array([a["low"] for a in acc]),
        np.array([a["high"] for a in acc]),
    )
