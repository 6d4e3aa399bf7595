"""`redkit analyze routing --run DIR`: the routing-quality protocol's routing report for a trained run.

    metrics    every router of the zoo trained (or built, if training-free) as RED's router and as
               the MoE gate on the run's cached features, exactly as stages router / gate train,
               with a monitor logging its metrics every `monitor_every` steps; routing metrics and
               RED / MoE accuracy of each, and the Gram matrix of the experts
    stability  RED's router retrained with `seeds` seeds (the run's seed and the next ones):
               agreement, saturation and Kendall τ over every pair of seeds, accuracy mean ± sd
    scaling    K ∈ `experts` equal-width parts of the answers: residual experts and heads trained
               for K (once), then every router on them
    overhead   ms and FLOPs of router forward, selection, expert forward and combination

Everything trained goes under `<run>/analysis/routing/` (variants of the run: `redkit_experiments.study.variant`);
the run's own modules are only read. A rerun skips every module already trained there.
"""

import time
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

import torch
from tqdm.auto import tqdm

from redkit.errors import RedkitError
from redkit.jsonfile import jsonl_objects
from redkit.modules.layers import ROUTERS
from redkit.modules.store import module_exists
from redkit.train.stages import STAGES
from redkit_experiments.routing.evaluate import evaluate_router, expert_gram
from redkit_experiments.routing.monitor import TrainingMonitor
from redkit_experiments.routing.overhead import overhead
from redkit_experiments.routing.stability import stability_metrics
from redkit_experiments.study.seeds import mcnemar_exact
from redkit_experiments.study.stats import t_interval
from redkit_experiments.study.variant import VariantRun

PARTS = ("metrics", "stability", "scaling", "overhead")
REFERENCE = "dense"  # the router every other one is tested against (McNemar), when it is analysed


@dataclass
class RoutingAnalysisConfig:
    routers: tuple[str, ...] = ()  # () = every registered router
    parts: tuple[str, ...] = PARTS
    seeds: int = 3  # stability: the run's seed and the next seeds - 1
    experts: tuple[int, ...] = (4, 8, 16, 32)  # scaling
    split: str = "test"
    batch: int = 512  # routing chunk (expert choice picks within it), per-batch MaxVio
    monitor_every: int = 50  # optimizer steps between two logged routing measurements
    # Every router, gate and scaling expert the analysis trains sees a fixed random 8,000 of train for at
    # most 5 epochs: a router separates 5 ranges from pooled features in far less, and the whole protocol
    # (8 routers x 2 roles, 3 seeds, 4 values of K) then fits in 10 minutes on 2 CPU cores. The run's own
    # router, trained on all of train, stays the full-data reference. 0 = no cap (the stages' own).
    max_epochs: int = 5
    train_examples: int = 8000
    repeats: int = 20  # timed calls per overhead component
    overhead_batch: int = 256

    def __post_init__(self) -> None:
        for name in self.routers:
            ROUTERS[name]  # unknown names fail (did you mean) before any work
        for part in self.parts:
            if part not in PARTS:
                raise RedkitError(f"unknown part {part!r} of the routing analysis (known: {', '.join(PARTS)})")
        if self.seeds < 2 and "stability" in self.parts:
            raise RedkitError(f"--seeds {self.seeds}: stability needs at least 2 seeds")
        for k in self.experts:
            if k < 2:
                raise RedkitError(f"--experts {k}: the scaling needs K >= 2")
        for flag, value in (("--monitor-every", self.monitor_every), ("--repeats", self.repeats)):
            if value < 1:
                raise RedkitError(f"{flag} must be at least 1, not {value}")
        for flag, value in (("--max-epochs", self.max_epochs), ("--train-examples", self.train_examples)):
            if value < 0:
                raise RedkitError(f"{flag} must be 0 (no cap) or more, not {value}")

    def router_names(self) -> list[str]:
        return list(self.routers) or ROUTERS.names()


def analysis_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "analysis" / "routing"


def roles_of(run) -> list[str]:
    """RED's router always; the MoE gate where the run has one (and its heads)."""
    if not module_exists(run.module_dir("router")):
        raise RedkitError(
            f"{run.dir}: the run has no trained router (modules/router); "
            f"train it first: redkit train router --run {run.dir}"
        )
    return ["router"] + (["gate"] if module_exists(run.module_dir("gate")) else [])


class AnalysisVariant(VariantRun):
    """A variant of the run whose train split may be a fixed random subset (`train_examples`), so
    that a quick analysis of a large run trains every router on fewer examples; val and test are whole."""

    def __init__(
        self,
        parent,
        directory: Path,
        trains: tuple[str, ...],
        config: "RoutingAnalysisConfig",
        experts: int | None = None,
    ):
        super().__init__(parent, directory, trains, experts=experts)
        self.train_examples = config.train_examples
        if config.max_epochs:  # 0: the stages' own caps
            self.config.cap_epochs(config.max_epochs, stages=("experts", "heads", "router", "gate"))

    def split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, classes, domains = super().split_tensors(name)
        if name != "train" or not self.train_examples or self.train_examples >= len(h):
            return h, classes, domains
        rows = (
            torch.randperm(len(h), generator=torch.Generator().manual_seed(20_004))[: self.train_examples].sort().values
        )
        return h[rows], classes[rows], domains[rows]


def router_variant(
    parent,
    directory: Path,
    name: str,
    roles: list[str],
    config: RoutingAnalysisConfig,
    seed: int | None = None,
    monitor: bool = False,
) -> tuple["AnalysisVariant", float]:
    """(`parent` with router `name` (and `seed`) trained for `roles` under `directory`, seconds).
    Always trained here, even for the router the run has: the monitor sees it train, and with no caps
    (`train_examples` = `max_epochs` = 0) the same seed and code give the run's own module."""
    variant = AnalysisVariant(parent, directory, tuple(roles), config)
    variant.config.router = name
    if seed is not None:
        variant.config.seed = seed
    if monitor:
        variant.monitor = TrainingMonitor(variant, every=config.monitor_every)
    start = time.perf_counter()
    for role in roles:
        STAGES[role](variant)
    variant.__dict__.pop("monitor", None)
    return variant, time.perf_counter() - start


def _evaluate(run, roles: list[str], config: RoutingAnalysisConfig) -> tuple[dict, dict]:
    """({role: metrics}, {role: per-example correctness})."""
    metrics, right = {}, {}
    for role in roles:
        evaluation = evaluate_router(run, role, config.split, config.batch)
        metrics[role], right[role] = evaluation.metrics, evaluation.right.numpy()
    return metrics, right


def _dynamics(variant: VariantRun) -> list[dict]:
    """The routing rows its monitor logged to the variant's log.jsonl (none if it was already trained)."""
    path = Path(variant.dir) / "log.jsonl"
    if not path.is_file():
        return []
    return [row for _, row in jsonl_objects(path, appended=True) if row.get("event") == "routing"]


def metrics_part(
    run, directory: Path, names: list[str], roles: list[str], config: RoutingAnalysisConfig
) -> tuple[dict, dict]:
    results, variants, right = {}, {}, {}
    for name in tqdm(names, desc="routers", unit="router", leave=False, dynamic_ncols=True):
        variant, seconds = router_variant(run, directory / "routers" / name, name, roles, config, monitor=True)
        metrics, right[name] = _evaluate(variant, roles, config)
        results[name] = {"roles": metrics, "train_seconds": seconds, "dynamics": _dynamics(variant)}
        variants[name] = variant
    reference = REFERENCE if REFERENCE in names else names[0]
    for name in names:  # McNemar's exact test against the reference router, per role, on the same examples
        for role in roles:
            results[name]["roles"][role]["vs_reference"] = mcnemar_exact(right[name][role], right[reference][role]) | {
                "reference": reference
            }
    experts = {role: expert_gram(run, role) for role in roles}
    return {"routers": results, "experts": experts}, variants


def stability_part(run, directory: Path, names: list[str], variants: dict, config: RoutingAnalysisConfig) -> dict:
    seeds = [run.config.seed + i for i in range(config.seeds)]
    out = {}
    for name in tqdm(names, desc="stability", unit="router", leave=False, dynamic_ncols=True):
        if ROUTERS[name].training_free:
            out[name] = {"deterministic": True}  # built from data, not trained: no seed to vary
            continue
        runs = [
            variants[name]
            if s == run.config.seed and name in variants
            else router_variant(run, directory / "seeds" / name / f"seed{s}", name, ["router"], config, seed=s)[0]
            for s in seeds
        ]
        evaluated = [evaluate_router(r, "router", config.split, config.batch) for r in runs]
        pairs = [
            stability_metrics(evaluated[a].selected, evaluated[b].selected, run.space.num_domains)
            for a, b in combinations(range(len(runs)), 2)
        ]
        out[name] = {
            "seeds": seeds,
            "accuracy": t_interval([e.metrics["accuracy"] for e in evaluated]),
            "pairs": pairs,
        } | {
            key: float(torch.tensor([p[key] for p in pairs]).nanmean())
            for key in ("agreement", "saturation", "kendall_tau")
        }
    return out


def scaling_part(run, directory: Path, names: list[str], roles: list[str], config: RoutingAnalysisConfig) -> dict:
    out = {}
    for k in tqdm(config.experts, desc="scaling K", unit="K", leave=False, dynamic_ncols=True):
        if k > run.space.num_classes:
            out[str(k)] = {"skipped": f"K = {k} exceeds the run's {run.space.num_classes} classes"}
            continue
        base = AnalysisVariant(
            run, directory / "scaling" / f"K{k}" / "experts", ("experts", "heads"), config, experts=k
        )
        start = time.perf_counter()
        STAGES["experts"](base, kinds=("residual",))
        if "gate" in roles:
            STAGES["heads"](base, domains=list(range(k)))
        experts_seconds = time.perf_counter() - start
        rows = {}
        for name in names:
            variant = VariantRun(base, directory / "scaling" / f"K{k}" / name, trains=tuple(roles))  # base's train rows
            variant.config.router = name
            start = time.perf_counter()
            for role in roles:
                STAGES[role](variant)
            rows[name] = {"roles": _evaluate(variant, roles, config)[0], "train_seconds": time.perf_counter() - start}
        out[str(k)] = {"experts_seconds": experts_seconds, "routers": rows}
    return out


def overhead_part(run, variants: dict, config: RoutingAnalysisConfig) -> dict:
    h = run.split_tensors(config.split)[0][: config.overhead_batch]
    return {name: overhead(variant, "router", h, config.repeats) for name, variant in variants.items()}


def routing_analysis(run, config: RoutingAnalysisConfig) -> dict:
    start = time.perf_counter()
    roles = roles_of(run)
    names = config.router_names()
    try:
        n = len(run.split_tensors(config.split)[1])
    except KeyError:
        raise RedkitError(f"--split {config.split}: the run has no such split") from None
    directory = analysis_dir(run.dir)
    result = {
        "config": asdict(config),
        "routers": names,
        "roles": roles,
        "split": config.split,
        "experts": run.space.num_domains,
        "domains": list(run.space.domains),
        "n": n,
        "seconds_per_part": {},
    }
    variants: dict = {}
    if {"metrics", "stability", "overhead"} & set(config.parts):
        t = time.perf_counter()
        result["metrics"], variants = metrics_part(run, directory, names, roles, config)
        result["seconds_per_part"]["metrics"] = time.perf_counter() - t
    for part, work in (
        ("stability", lambda: stability_part(run, directory, names, variants, config)),
        ("scaling", lambda: scaling_part(run, directory, names, roles, config)),
        ("overhead", lambda: overhead_part(run, variants, config)),
    ):
        if part in config.parts:
            t = time.perf_counter()
            result[part] = work()
            result["seconds_per_part"][part] = time.perf_counter() - t
    result["seconds"] = time.perf_counter() - start
    return result


def run_routing_analysis(run_dir: Path, config: RoutingAnalysisConfig, print_fn=print) -> dict:
    """Analyse the run at `run_dir`, write `<run>/analysis/routing/`, print its report."""
    from redkit.run import open_run
    from redkit_experiments.routing.report import write_routing_analysis

    result = routing_analysis(open_run(run_dir), config)
    directory = write_routing_analysis(run_dir, analysis_dir(run_dir), result)
    print_fn((directory / "report.md").read_text())
    return result
