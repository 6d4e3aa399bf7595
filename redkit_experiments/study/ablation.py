"""`redkit study ablation` (paper §4.9): which parts of RED matter, each variant trained alone on
the run's cached features exactly as the main stages train (the stage functions themselves, on a
`VariantRun`), and evaluated on the same split.

    rank        residual experts of rank r ∈ {d/2, d/4, d/8, d/16, d/32}, the run's router
    correction  where the correction lives: hidden-space residual (RED), logit space, full heads
                (MoE); each with its trained router / gate, oracle α and uniform α
    experts     K ∈ {2, 5, 10, 20} experts, each a contiguous equal-width part of the answers;
                experts, heads, router and gate retrained for K
    base        (--with-base) stage base on 5%, 10%, 25%, 100% of train: a whole pipeline each

The paper's figures sit beside ours where §4.9 gives any (Task 1 and Task 2 only).
"""

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import f1_score

from redkit.compositions import ROUTED, ModuleSet, compose
from redkit.errors import RedkitError
from redkit.evaluate import routing_accuracy
from redkit.run import TextRun
from redkit.train.stages import PIPELINE, STAGES
from redkit_experiments.digits.run import DigitsRun
from redkit_experiments.study.links import link_data
from redkit_experiments.study.noise import REFERENCES, FeatureAccuracy
from redkit_experiments.study.variant import VariantRun

PARTS = ("rank", "correction", "experts", "base")

# §4.9's tables, as the paper reports them (accuracy), to print beside ours.
PAPER = {
    "rank": {"task1": {2: 0.969, 4: 0.965, 8: 0.951}, "task2": {2: 0.750, 4: 0.744, 8: 0.728}},  # key: d / r
    "correction": {"task1": {"residual": 0.9725, "heads": 0.8576}, "task2": {"residual": 0.7583, "heads": 0.5338}},
}


@dataclass
class AblationConfig:
    parts: tuple[str, ...] = ("rank", "correction", "experts")  # "base" is added by --with-base
    rank_divisors: tuple[int, ...] = (2, 4, 8, 16, 32)  # r = d / divisor
    experts: tuple[int, ...] = (2, 5, 10, 20)
    base_fractions: tuple[float, ...] = (0.05, 0.1, 0.25, 1.0)
    split: str = "test"

    def __post_init__(self) -> None:
        for part in self.parts:
            if part not in PARTS:
                raise RedkitError(f"unknown ablation {part!r} (known: {', '.join(PARTS)})")
        for k in self.experts:
            if k < 2:
                raise RedkitError(f"--experts {k}: an ablation of the number of experts needs K >= 2")
        for f in self.base_fractions:
            if not 0 < f <= 1:
                raise RedkitError(f"base fraction {f} is outside (0, 1]")


def _scores(
    modules: ModuleSet, h: torch.Tensor, classes: torch.Tensor, domains: torch.Tensor, names: list[str]
) -> dict:
    """{composition: {"accuracy", "macro_f1"}} on one split."""
    out = {}
    true = classes.numpy()
    for name in names:
        pred = compose(name, modules, h, domains).probs.argmax(dim=-1).cpu().numpy()
        out[name] = {
            "accuracy": float((pred == true).mean()),
            "macro_f1": float(f1_score(true, pred, labels=np.unique(true), average="macro", zero_division=0)),
        }
    return out


def _parameters(run, experts: str) -> int:
    """Parameters of the run's K experts of one kind: "residual", "logit" or "heads"."""
    modules = ModuleSet(run)
    return sum(
        p.numel() for m in (modules.heads() if experts == "heads" else modules.experts(experts)) for p in m.parameters()
    )


def ablate_rank(run, directory: Path, config: AblationConfig) -> list[dict]:
    h, classes, domains = run.split_tensors(config.split)
    own = run.config.expert_rank or run.feature_dim // 4
    rows = []
    for divisor in config.rank_divisors:
        rank = run.feature_dim // divisor
        if rank < 1:
            continue
        if rank == own:
            variant, seconds = run, 0.0  # the run's own experts
        else:
            variant = VariantRun(run, directory / f"rank-{rank}", trains=("experts",), rank=rank)
            STAGES["experts"](variant, kinds=("residual",))
            seconds = variant.timings.get("experts", 0.0)
        rows.append(
            {
                "divisor": divisor,
                "rank": rank,
                "own": rank == own,
                "seconds": seconds,
                "parameters": _parameters(variant, "residual"),
                "scores": _scores(ModuleSet(variant), h, classes, domains, ["red", "red_oracle", "red_uniform"]),
            }
        )
    return rows


def ablate_correction(run, config: AblationConfig) -> list[dict]:
    """The three places a correction can live, with the modules the run already has."""
    h, classes, domains = run.split_tensors(config.split)
    modules = ModuleSet(run)
    accuracy = FeatureAccuracy(modules, h, classes, domains)
    rows = []
    for name in ("red", "red_logit_experts", "moe"):
        place = ROUTED[name].mixture
        rows.append(
            {
                "composition": name,
                "place": place,
                "parameters": _parameters(run, place),
                "accuracy": {ref: accuracy(name, alpha_of) for ref, alpha_of in REFERENCES.items()},
            }
        )
    return rows


def ablate_experts(run, directory: Path, config: AblationConfig) -> list[dict]:
    h, classes, _ = run.split_tensors(config.split)
    rows = []
    for k in config.experts:
        if k > run.space.num_classes:
            rows.append({"experts": k, "skipped": f"more experts than the {run.space.num_classes} classes"})
            continue
        variant = VariantRun(run, directory / f"experts-{k}", trains=("experts", "heads", "router", "gate"), experts=k)
        STAGES["experts"](variant, kinds=("residual",))
        STAGES["heads"](variant, domains=list(range(k)))  # the global head does not depend on K: not retrained
        STAGES["router"](variant)
        STAGES["gate"](variant)
        domains = variant.split_tensors(config.split)[2]
        modules = ModuleSet(variant)
        rows.append(
            {
                "experts": k,
                "seconds": dict(variant.timings),
                "router_accuracy": routing_accuracy(modules.router(), h, domains)["accuracy"],
                "gate_accuracy": routing_accuracy(modules.gate(), h, domains)["accuracy"],
                "scores": _scores(
                    modules, h, classes, domains, ["red", "red_oracle", "red_uniform", "moe", "oracle", "uniform"]
                ),
            }
        )
    return rows


def ablate_base(run: TextRun, directory: Path, config: AblationConfig) -> list[dict]:
    """Stage base on another share of train: its features change, so every stage after it too."""
    rows = []
    for fraction in config.base_fractions:
        child_dir = directory / f"base-{fraction:g}"
        link_data(run.dir / "data", child_dir / "data")
        child = type(run)(child_dir, replace(run.config, base_fraction=fraction))
        start = time.perf_counter()
        for stage in PIPELINE:
            STAGES[stage](child)
        h, classes, domains = child.split_tensors(config.split)
        rows.append(
            {
                "fraction": fraction,
                "base_examples": len(child.base_subset()),
                "seconds": dict(child.timings),
                "wall_seconds": time.perf_counter() - start,
                "scores": _scores(
                    ModuleSet(child), h, classes, domains, ["base_classifier", "red", "moe", "global_head"]
                ),
            }
        )
    return rows


def ablation_study(run, config: AblationConfig, directory: Path) -> dict:
    """Every part of `config.parts`; variants are trained under `directory` (a rerun reuses them)."""
    start = time.perf_counter()
    if config.split not in run.splits:
        raise RedkitError(f"--split {config.split}: this run has no such split (it has {', '.join(run.splits)})")
    if "base" in config.parts and isinstance(run, DigitsRun):
        raise RedkitError(
            "the base-fraction ablation retrains stage base of a text run; digits runs have their own base stage"
        )
    result = {
        "study": "ablation",
        "task": getattr(run.config, "task", "digits"),
        "config": asdict(config),
        "feature_dim": run.feature_dim,
        "seconds": {},
    }
    for part in config.parts:
        part_start = time.perf_counter()
        if part == "rank":
            result["rank"] = ablate_rank(run, directory, config)
        elif part == "correction":
            result["correction"] = ablate_correction(run, config)
        elif part == "experts":
            result["experts"] = ablate_experts(run, directory, config)
        elif part == "base":
            result["base"] = ablate_base(run, directory, config)
        result["seconds"][part] = time.perf_counter() - part_start
    result["seconds"]["total"] = time.perf_counter() - start
    return result
