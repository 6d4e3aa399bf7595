"""`redkit study levers --run RUN [--run RUN2 ...] [--replicate RUN_SEED1 ...]`: what moves RED on real
data, measured on val (where defaults are chosen) and on test (reported, never chosen on).

    base     one row per --run: its stage-base recipe (base fraction, trainable layers), RED with its
             router and with the label-structure router, the oracle-α gap, and the references
    routing  the experts and C of a run stay frozen; only how α is made changes (docs/guides/design.md, decision 15):
               the paper's dense router (the run's) and its width; (a) routers trained through the
               frozen composition on its label loss, alone or beside the domain loss; (b) a router that
               reads the global head's label distribution as well as h (dense_labels), and the
               training-free domain marginal of that distribution (labels, from G or from C); (c) soft
               mixtures: α at temperature 0.5 / 2 / 4, GShard's top-2, and red_mixture (the experts'
               output distributions mixed instead of their updates); (d) the log-linear pool of the
               dense router's and the label marginal's domain opinions (Genest & Zidek 1986), a router
               trained on the pretrained (untuned) backbone's features, and training-free prototypes
    experts  residual experts of rank d/16, d/8, d/2 beside the run's (d/4), retrained alone

With --replicate (the same recipe at other seeds: `redkit study seeds --task clinc150`), the routing
and expert variants are measured on every replicate too, and each is compared with the run's own
router by a paired t-test over the seeds (val and test accuracy of red): a lever is adopted only
where val says so over the seeds. Every trained variant runs the main stage functions on a
`VariantRun` (redkit_experiments/study/variant.py), so it is trained exactly as a run's would be.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from redkit.compositions import ModuleSet, compose, default_compositions
from redkit.train.stages import STAGES
from redkit_experiments.study.stats import paired_t_p
from redkit_experiments.study.variant import VariantRun

COMPOSITIONS = ("red", "red_mixture", "red_per_domain")
ORACLES = {"red": "red_oracle", "red_mixture": "red_oracle", "red_per_domain": "red_per_domain_oracle"}
SPLITS = ("val", "test")
OWN = "dense (the run's)"


@dataclass
class LeverConfig:
    ranks: tuple[int, ...] = (16, 8, 2)  # r = d / divisor, beside the run's own
    temperatures: tuple[float, ...] = (0.5, 2.0, 4.0)
    router_hidden: int = 1024


def _names(run) -> tuple[str, ...]:
    usable = default_compositions(run.space)
    return tuple(name for name in COMPOSITIONS if name in usable)


def _accuracy(modules: ModuleSet, h, classes, domains, name: str, alpha=None) -> float:
    noise = (lambda logits, labels: alpha) if alpha is not None else None
    probs = compose(name, modules, h, domains, noise).probs
    return float((probs.argmax(dim=-1).cpu() == classes).float().mean())


def _row(modules: ModuleSet, data: dict, seconds: float, alpha_of=None) -> dict:
    """Accuracy of each composition on val and test (α from the modules' router, or `alpha_of(split)`),
    the oracle-α gap on test, and how often α's top domain is the true one."""
    row = {"seconds": seconds}
    names = _names(modules.run)
    for split, (h, classes, domains) in data.items():
        alpha = alpha_of(split) if alpha_of else None
        for name in names:
            row[f"{name}_{split}"] = _accuracy(modules, h, classes, domains, name, alpha)
        if alpha is None:
            alpha = compose("red", modules, h, domains).weights
        row[f"router_{split}"] = float((alpha.argmax(dim=-1).cpu() == domains).float().mean())
    h, classes, domains = data["test"]
    for name in names:
        row[f"{name}_gap_test"] = row[f"{name}_test"] - _accuracy(modules, h, classes, domains, ORACLES[name])
    return row


def _router_variant(run, directory: Path, router: str, router_loss: str = "domain", **options) -> VariantRun:
    variant = VariantRun(run, directory, trains=("router",))
    variant.config.router = router
    variant.config.router_loss = router_loss
    variant.config.router_options = options
    STAGES["router"](variant)
    return variant


def _label_marginal(modules: ModuleSet, h: torch.Tensor, head: str = "global_head") -> torch.Tensor:
    """(N, K) Σ_{y∈D_k} softmax(G(h))_y: the domain marginal of a global head's label distribution."""
    g = modules.global_head() if head == "global_head" else modules.classifier()
    mask = modules.run.space.domain_mask().to(h.device).float()  # (K, C)
    return F.softmax(g(h), dim=-1) @ mask.T


def routing_levers(run, directory: Path, data: dict, config: LeverConfig) -> dict:
    own = ModuleSet(run)
    device = run.device

    def logits_of(split):
        return own.router()(data[split][0].to(device))

    rows = {OWN: _row(own, data, run.timings.get("router", 0.0))}
    trained = [
        ("dense, hidden 1024", "dense", "domain", {"hidden": config.router_hidden}),
        ("(a) label loss", "dense", "label", {}),
        ("(a) label + domain loss", "dense", "label+domain", {}),
        ("(b) dense_labels: reads G's label distribution", "dense_labels", "domain", {}),
        ("(c) GShard top-2", "top2", "domain", {}),
    ]
    if run.space.class_domains:
        trained += [
            ("(b) labels from G (training-free)", "labels", "domain", {"source": "global_head"}),
            ("(b) labels from C (training-free)", "labels", "domain", {"source": "classifier"}),
        ]
    trained += [("(d) prototype (training-free)", "prototype", "domain", {})]
    for name, router, loss, options in trained:
        variant = _router_variant(
            run,
            directory / name.split(":")[0].replace(" ", "-").replace("(", "").replace(")", ""),
            router,
            loss,
            **options,
        )
        rows[name] = _row(ModuleSet(variant), data, variant.timings.get("router", 0.0))
    for t in config.temperatures:
        rows[f"(c) dense, α at T={t:g}"] = _row(
            own, data, 0.0, lambda split, t=t: F.softmax(logits_of(split) / t, dim=-1)
        )
    if run.space.class_domains:

        def pooled(split):  # log-linear pool of two domain opinions, equal weights
            log_alpha = F.log_softmax(logits_of(split), dim=-1) + torch.log(
                _label_marginal(own, data[split][0].to(device))
            )
            return F.softmax(0.5 * log_alpha, dim=-1)

        rows["(d) pool: dense × labels from G"] = _row(own, data, 0.0, pooled)
    rows["(d) dense on the pretrained backbone's features"] = _frozen_router_row(
        run, directory / "dense-frozen", own, data
    )
    return rows


def _frozen_router_row(run, directory: Path, modules: ModuleSet, data: dict) -> dict:
    """A dense router trained (as stage router trains one) on the untuned backbone's features; the
    experts still act on the tuned ones. What the router sees, and nothing else, changes."""
    from redkit.references.linear_probe import frozen_features

    frozen = {
        split: frozen_features(run, split, [ex.question for ex in run.splits[split]]) for split in ("train", *SPLITS)
    }

    class FrozenView(VariantRun):
        def split_tensors(self, name):
            h, classes, domains = self.parent.split_tensors(name)
            return frozen[name], classes, domains

    variant = FrozenView(run, directory, trains=("router",))
    variant.config.router, variant.config.router_loss, variant.config.router_options = "dense", "domain", {}
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

    results = run.read_results()
    data = {split: run.split_tensors(split) for split in SPLITS}
    modules = ModuleSet(run)
    row = {
        "base_fraction": run.config.base_fraction,
        "trainable_layers": run.config.backbone.trainable_layers,
        "base_seconds": results["wall_seconds_per_stage"].get("base"),
        "run": str(run.dir),
    }
    row |= {f"{k}": v for k, v in _row(modules, data, 0.0).items() if k != "seconds"}
    if run.space.class_domains:
        labels = _router_variant(
            run, Path(run.dir) / "studies" / "levers" / "labels-from-global_head", "labels", source="global_head"
        )
        row |= {f"labels_{k}": v for k, v in _row(ModuleSet(labels), data, 0.0).items() if k != "seconds"}
    for reference in ("joint", "linear_probe", "global_head"):
        for split in SPLITS:
            if reference in results["splits"].get(split, {}):
                row[f"{reference}_{split}"] = results["splits"][split][reference]["accuracy"]
    return row


def _variants(run, config: LeverConfig) -> dict:
    directory = Path(run.dir) / "studies" / "levers"
    data = {split: run.split_tensors(split) for split in SPLITS}
    return {
        "routing": routing_levers(run, directory / "routing", data, config),
        "experts": expert_levers(run, directory / "experts", data, config),
    }


def over_seeds(per_run: list[dict]) -> dict:
    """{part: {variant: {key: mean over the runs, and red's val / test difference to the run's own
    router with its paired t-test over the runs}}}."""
    out = {}
    for part in ("routing", "experts"):
        own_name = next(iter(per_run[0][part]))
        out[part] = {}
        for name in per_run[0][part]:
            rows = [r[part][name] for r in per_run if name in r[part]]
            merged = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
            for split in SPLITS:
                a = [r[part][name][f"red_{split}"] for r in per_run]
                b = [r[part][own_name][f"red_{split}"] for r in per_run]
                merged[f"diff_{split}"] = float(np.mean(np.subtract(a, b)))
                merged[f"p_{split}"] = paired_t_p(a, b)
            out[part][name] = merged
    return out


def levers_study(runs: list, config: LeverConfig, replicates: list | None = None) -> dict:
    start = time.perf_counter()
    replicates = replicates or []
    per_run = [_variants(run, config) for run in [runs[0], *replicates]]
    result = {"base": [base_row(run) for run in runs], **per_run[0], "replicates": [str(r.dir) for r in replicates]}
    if replicates:
        result["over_seeds"] = over_seeds(per_run)
        result["per_seed"] = per_run
    return result | {"seconds": time.perf_counter() - start}


def _f(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def _signed(x) -> str:
    return "–" if x is None else f"{x:+.4f}"


def _p(x) -> str:
    return "–" if x is None else (f"{x:.2g}" if x >= 1e-4 else "< 1e-4")


def _variant_table(
    rows: dict, names: tuple[str, ...], extra: Callable[[dict], list[str]] | None = None, extra_header: list[str] = ()
) -> str:
    from redkit.report import markdown_table

    header = [
        "Variant",
        "Train s",
        *[f"{n} {s}" for n in names for s in SPLITS],
        "red − oracle α",
        "router acc val",
        "router acc test",
        *extra_header,
    ]
    return markdown_table(
        header,
        [
            [
                name,
                f"{r['seconds']:.1f}",
                *[_f(r.get(f"{n}_{s}")) for n in names for s in SPLITS],
                _signed(r.get("red_gap_test")),
                _f(r["router_val"]),
                _f(r["router_test"]),
                *(extra(r) if extra else []),
            ]
            for name, r in rows.items()
        ],
    )


def levers_report(directory: Path, result: dict) -> str:
    from redkit.report import markdown_table

    names = tuple(n for n in COMPOSITIONS if f"{n}_val" in next(iter(result["routing"].values())))
    out = ["# Levers: what moves RED on this data (chosen on val, reported on test)", ""]
    base_rows = []
    for r in result["base"]:
        base_rows.append(
            [
                f"{r['base_fraction']:g}",
                str(r["trainable_layers"]),
                f"{r['base_seconds'] or 0:.0f}",
                _f(r["red_val"]),
                _f(r["red_test"]),
                _signed(r["red_gap_test"]),
                _f(r.get("labels_red_val")),
                _f(r.get("labels_red_test")),
                _f(r["router_test"]),
                _f(r.get("labels_router_test")),
                _f(r.get("joint_val")),
                _f(r.get("joint_test")),
                _f(r.get("global_head_test")),
                _f(r.get("linear_probe_test")),
            ]
        )
    out += [
        "## The base: stage base's recipe, one run each",
        "",
        markdown_table(
            [
                "Base fraction",
                "Trainable layers",
                "Base s",
                "red val",
                "red test",
                "red − oracle α",
                "+labels router: red val",
                "+labels router: red test",
                "router acc (test)",
                "labels router acc (test)",
                "joint val",
                "joint test",
                "global_head test",
                "linear_probe test",
            ],
            base_rows,
        ),
        "",
    ]
    for part, title in (
        ("routing", "Routing (the run's experts and C, frozen; only α changes)"),
        ("experts", "Experts (the run's router; only the experts change)"),
    ):
        out += [f"## {title}", "", _variant_table(result[part], names), ""]
    if "over_seeds" in result:
        seeds = 1 + len(result["replicates"])
        out += [f"## Over {seeds} seeds (mean; red − the run's router, paired t-test over the seeds)", ""]
        for part in ("routing", "experts"):
            out += [
                _variant_table(
                    result["over_seeds"][part],
                    names,
                    lambda r: [_signed(r["diff_val"]), _p(r["p_val"]), _signed(r["diff_test"]), _p(r["p_test"])],
                    ["Δ red val", "p (val)", "Δ red test", "p (test)"],
                ),
                "",
            ]
    chosen = result.get("over_seeds", {"routing": result["routing"]})["routing"]
    best = max(chosen.items(), key=lambda item: item[1]["red_val"])
    out += [
        f"Best red on val: **{best[0]}** (val {_f(best[1]['red_val'])}, test {_f(best[1]['red_test'])}); the "
        f"run's own router: val {_f(chosen[OWN]['red_val'])}, test {_f(chosen[OWN]['red_test'])}.",
        "",
        f"Study wall time: {result['seconds']:.0f} s.",
    ]
    return "\n".join(out)
