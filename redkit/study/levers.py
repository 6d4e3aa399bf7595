"""`redkit study levers --run RUN [--run RUN2 ...]`: what moves RED on real data, measured on val
(where defaults are chosen) and on test (reported, never chosen on).

    base     one row per given run: its stage-base recipe (base fraction, trainable layers), RED and
             red_within with the run's router and with the label-structure router, their oracle-α
             gap, joint and linear_probe where the run has them, and the seconds of stage base
    routing  on the first run's cached features, nothing but the router changes:
               dense (the run's, trained on tuned features), dense with hidden 1024, dense trained on
               the frozen (untuned) backbone's features, the label-structure router read off the
               global head or off C, training-free prototypes; and post hoc, the dense router's α at
               temperature 0.5 / 2 and hard top-1
    experts  residual experts of rank d/16, d/8, d/2 beside the run's (d/4), retrained alone

Every variant trains with the main stage functions on a `VariantRun` (redkit/study/variant.py),
so it is trained exactly as a run would be; its wall time is reported beside its accuracy.
"""

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from redkit.compositions import ModuleSet, compose
from redkit.evaluate import routing_accuracy
from redkit.study.variant import VariantRun
from redkit.train.stages import STAGES

COMPOSITIONS = ("red", "red_within")
ORACLES = {"red": "red_oracle", "red_within": "red_within_oracle"}
SPLITS = ("val", "test")


@dataclass
class LeverConfig:
    ranks: tuple[int, ...] = (16, 8, 2)  # r = d / divisor, beside the run's own
    temperatures: tuple[float, ...] = (0.5, 2.0)
    router_hidden: int = 1024


def _accuracy(modules: ModuleSet, h, classes, domains, name: str, alpha=None) -> float:
    noise = (lambda logits, labels: alpha) if alpha is not None else None
    probs = compose(name, modules, h, domains, noise).probs
    return float((probs.argmax(dim=-1).cpu() == classes).float().mean())


def _row(modules: ModuleSet, data: dict, seconds: float, alpha_of=None) -> dict:
    """Accuracy of red / red_within on val and test (α from the modules' router, or `alpha_of(split)`),
    the oracle-α gap on test, and how often α's top domain is the true one."""
    row = {"seconds": seconds}
    for split, (h, classes, domains) in data.items():
        alpha = alpha_of(split) if alpha_of else None
        for name in COMPOSITIONS:
            row[f"{name}_{split}"] = _accuracy(modules, h, classes, domains, name, alpha)
        if alpha is None:
            alpha = compose("red", modules, h, domains).weights
        row[f"router_{split}"] = float((alpha.argmax(dim=-1).cpu() == domains).float().mean())
    h, classes, domains = data["test"]
    for name, oracle in ORACLES.items():
        row[f"{name}_gap_test"] = row[f"{name}_test"] - _accuracy(modules, h, classes, domains, oracle)
    return row


def _router_variant(run, directory: Path, router: str, **config) -> VariantRun:
    variant = VariantRun(run, directory, trains=("router",))
    variant.config.router = router
    if config:
        variant.config.router_options = config
    STAGES["router"](variant)
    return variant


def routing_levers(run, directory: Path, data: dict, config: LeverConfig) -> dict:
    own = ModuleSet(run)
    rows = {"dense (the run's)": _row(own, data, run.timings.get("router", 0.0))}
    for name, router, extra in (("dense, hidden 1024", "dense", {"hidden": config.router_hidden}),
                                ("labels from global_full", "labels", {"source": "global_full"}),
                                ("labels from C", "labels", {"source": "classifier"}),
                                ("prototype", "prototype", {})):
        variant = _router_variant(run, directory / name.replace(" ", "-"), router, **extra)
        rows[name] = _row(ModuleSet(variant), data, variant.timings.get("router", 0.0))
    rows["dense on frozen features"] = _frozen_router_row(run, directory / "dense-frozen", own, data)
    for t in config.temperatures:
        rows[f"dense, α at T={t}"] = _row(own, data, 0.0, lambda split, t=t: F.softmax(
            own.router()(data[split][0].to(run.device)) / t, dim=-1))
    rows["dense, hard top-1 α"] = _row(own, data, 0.0, lambda split: F.one_hot(
        own.router()(data[split][0].to(run.device)).argmax(dim=-1), run.space.num_domains).float())
    return rows


def _frozen_router_row(run, directory: Path, modules: ModuleSet, data: dict) -> dict:
    """A dense router trained (as stage router trains one) on the untuned backbone's features; the
    experts still act on the tuned ones. What the router sees, and nothing else, changes."""
    from redkit.references.linear_probe import frozen_features

    frozen = {split: frozen_features(run, split, [ex.question for ex in run.splits[split]]) for split in ("train", *SPLITS)}

    class FrozenView(VariantRun):
        def split_tensors(self, name):
            h, classes, domains = self.parent.split_tensors(name)
            return frozen[name], classes, domains

    variant = FrozenView(run, directory, trains=("router",))
    STAGES["router"](variant)
    router = ModuleSet(variant).router()
    with torch.no_grad():
        alphas = {split: F.softmax(router(frozen[split].to(run.device)), dim=-1) for split in SPLITS}
    return _row(modules, data, variant.timings.get("router", 0.0), lambda split: alphas[split])


def expert_levers(run, directory: Path, data: dict, config: LeverConfig) -> dict:
    dim, own_rank = run.feature_dim, run.config.expert_rank or run.feature_dim // 4
    rows = {f"rank {own_rank} (the run's)": _row(ModuleSet(run), data, run.timings.get("experts", 0.0))}
    for divisor in config.ranks:
        rank = dim // divisor
        if rank == own_rank:
            continue
        variant = VariantRun(run, directory / f"rank-{rank}", trains=("experts",), rank=rank)
        STAGES["experts"](variant, kinds=("residual",))
        rows[f"rank {rank}"] = _row(ModuleSet(variant), data, variant.timings.get("experts", 0.0))
    return rows


def base_row(run) -> dict:
    """A run's recipe and headline figures, with the label-structure router beside its own."""
    import json

    results = json.loads((Path(run.dir) / "results.json").read_text())
    data = {split: run.split_tensors(split) for split in SPLITS}
    modules = ModuleSet(run)
    row = {"base_fraction": run.config.base_fraction, "trainable_layers": run.config.backbone.trainable_layers,
           "base_seconds": results["wall_seconds_per_stage"].get("base"), "run": str(run.dir)}
    row |= {f"{k}": v for k, v in _row(modules, data, 0.0).items() if k != "seconds"}
    labels = _router_variant(run, Path(run.dir) / "studies" / "levers" / "labels-from-global_full", "labels", source="global_full")
    row |= {f"labels_{k}": v for k, v in _row(ModuleSet(labels), data, 0.0).items() if k != "seconds"}
    for reference in ("joint", "linear_probe", "global_full"):
        for split in SPLITS:
            if reference in results["splits"].get(split, {}):
                row[f"{reference}_{split}"] = results["splits"][split][reference]["accuracy"]
    return row


def levers_study(runs: list, config: LeverConfig) -> dict:
    start = time.perf_counter()
    first = runs[0]
    directory = Path(first.dir) / "studies" / "levers"
    data = {split: first.split_tensors(split) for split in SPLITS}
    result = {"base": [base_row(run) for run in runs],
              "routing": routing_levers(first, directory / "routing", data, config),
              "experts": expert_levers(first, directory / "experts", data, config)}
    return result | {"seconds": time.perf_counter() - start}


def _f(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def _signed(x) -> str:
    return "–" if x is None else f"{x:+.4f}"


def levers_report(directory: Path, result: dict) -> str:
    from redkit.report import markdown_table

    out = ["# Levers: what moves RED on this data (chosen on val, reported on test)", ""]
    out += ["## The base: stage base's recipe, one run each", "",
            markdown_table(["Base fraction", "Trainable layers", "Base s", "red val", "red test", "red − oracle α",
                            "red_within val", "red_within test", "red_within − oracle α", "+labels router: red_within val",
                            "+labels router: red_within test", "router acc (test)", "labels router acc (test)",
                            "joint val", "joint test", "linear_probe test", "global_full test"],
                           [[f"{r['base_fraction']:g}", str(r["trainable_layers"]), f"{r['base_seconds'] or 0:.0f}",
                             _f(r["red_val"]), _f(r["red_test"]), _signed(r["red_gap_test"]), _f(r["red_within_val"]),
                             _f(r["red_within_test"]), _signed(r["red_within_gap_test"]), _f(r["labels_red_within_val"]),
                             _f(r["labels_red_within_test"]), _f(r["router_test"]), _f(r["labels_router_test"]),
                             _f(r.get("joint_val")), _f(r.get("joint_test")), _f(r.get("linear_probe_test")),
                             _f(r.get("global_full_test"))] for r in result["base"]]), ""]
    for part, title in (("routing", "Routing (the first run's experts; only the router changes)"),
                        ("experts", "Experts (the first run's router; only the experts change)")):
        out += [f"## {title}", "",
                markdown_table(["Variant", "Train s", "red val", "red test", "red − oracle α", "red_within val",
                                "red_within test", "red_within − oracle α", "router acc val", "router acc test"],
                               [[name, f"{r['seconds']:.1f}", _f(r["red_val"]), _f(r["red_test"]), _signed(r["red_gap_test"]),
                                 _f(r["red_within_val"]), _f(r["red_within_test"]), _signed(r["red_within_gap_test"]),
                                 _f(r["router_val"]), _f(r["router_test"])] for name, r in result[part].items()]), ""]
    best = max(((part, name, r) for part in ("routing", "experts") for name, r in result[part].items()),
               key=lambda item: max(item[2]["red_val"], item[2]["red_within_val"]))
    composition = "red_within" if best[2]["red_within_val"] >= best[2]["red_val"] else "red"
    out += [f"Best on val: {best[0]} variant **{best[1]}** with {composition} "
            f"(val {_f(best[2][composition + '_val'])}, test {_f(best[2][composition + '_test'])}).", "",
            f"Study wall time: {result['seconds']:.0f} s."]
    return "\n".join(out)
