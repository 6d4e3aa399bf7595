"""`redkit reproduce spectra`: the routing-quality protocol's experiment at CPU scale, one seed at a time.

    <out>/seed-<s>/results.json   per variant: training curve, routing log, held-out measurements;
                                  the router replacement arms; the E-sweep rows (if asked)
    <out>/results.json            every seed's rows, the tables over seeds, the verdicts, wall times
    <out>/report.md, figures/, report.html

A seed whose results.json exists (same configuration) is read, not retrained: several processes may
each run one seed into the same <out> (`--seed-list`), and a last call with every seed aggregates.
The E-sweep's rows are added to a stored seed: `--sweep 4,8` later trains only the missing E.

Router replacement (the protocol: "Mixtral router replacement"): the stock variant, trained for `steps`,
continues `replacement_steps` more steps three ways from the same weights and the same batches:
with its stock gate, with SPECTRA swapped in, with Expert Choice swapped in (a fresh router each:
SPECTRA's parameters do not exist in the stock model; Expert Choice starts from the stock gate's weight).
"""

import copy
import json
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from redkit.atomic import write_json
from redkit.errors import RedkitError
from redkit.threads import torch_threads
from redkit_experiments.routing.token import replace_router
from redkit_experiments.spectra.corpus import Corpus, CorpusConfig, build_corpus
from redkit_experiments.spectra.measure import measure
from redkit_experiments.spectra.model import VARIANT_NAMES, VARIANTS, ModelConfig, Variant, build_model
from redkit_experiments.spectra.train import TrainConfig, train

SWEEP_VARIANTS = ("switch top-2", "spectra")
REPLACEMENT_ARMS = (
    ("continue stock", None),
    ("swap in spectra", "spectra"),
    ("swap in expert choice", "expert_choice"),
)


@dataclass
class ExperimentConfig:
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    variants: tuple[str, ...] = tuple(v.name for v in VARIANTS)
    seeds: tuple[int, ...] = (0,)
    sweep: tuple[int, ...] = ()  # E values of Table 11 (empty: no sweep)
    sweep_seeds: tuple[int, ...] = ()  # the seeds that run the sweep (empty: every seed)
    replacement_steps: int = 100  # 0: no replacement experiment
    eval_sequences: int = 16  # held-out windows per domain
    overhead_repeats: int = 20
    threads: int = 0  # torch CPU threads; 0 = torch's default (every core: 1.5x faster than one on this 2-core machine)

    def __post_init__(self) -> None:
        for name in self.variants:
            if name not in VARIANT_NAMES:
                raise RedkitError(f"unknown variant {name!r} (known: {', '.join(VARIANT_NAMES)})")
        for e in self.sweep:
            if e < 2:
                raise RedkitError(f"--sweep {e}: a mixture needs at least 2 experts")
        if self.train.steps < 1:
            raise RedkitError(f"--steps {self.train.steps}: must be at least 1")
        if self.replacement_steps and "stock (dense top-2)" not in self.variants:
            raise RedkitError(
                "the router replacement continues the stock variant: keep 'stock (dense top-2)' in --variants "
                "or pass --replacement-steps 0"
            )

    def seed_key(self) -> dict:
        """What a seed's results depend on (a stored seed with another key is retrained)."""
        d = asdict(self)
        for independent in (
            "seeds",
            "threads",
            "overhead_repeats",
            "sweep",
            "sweep_seeds",
        ):  # the sweep's rows are added to a stored seed
            d.pop(independent)
        return d


def _summary(result: dict, measured: dict) -> dict:
    """One variant's row: its measurements, its training curve and a compact routing log."""
    log = [
        {
            "step": r["step"],
            "mean": r["mean"],
            "load_topk": [layer["load_topk"] for layer in r["layers"]],
            "vs_previous": r.get("vs_previous"),
        }
        for r in result["routing"]
    ]
    return {
        "measure": measured,
        "train_loss": result["train_loss"],
        "seconds": result["seconds"],
        "seconds_per_step": result["seconds_per_step"],
        "routing_log": log,
    }


def train_variant(
    corpus: Corpus, config: ExperimentConfig, model_config: ModelConfig, variant: Variant, seed: int, log_dir: Path
):
    model = build_model(model_config, variant, seed)
    generator = torch.Generator().manual_seed(10_000 + seed)  # the same batches for every variant
    result = train(
        model, corpus, config.train, model_config.length, generator, log_dir, label=f"seed {seed} {variant.name}"
    )
    return model, _summary(result, measure(model, corpus, model_config.length, config.eval_sequences))


def replacement(corpus: Corpus, config: ExperimentConfig, stock_model, seed: int, log_dir: Path) -> dict:
    rows = {}
    steps = copy.copy(config.train)
    steps.steps, steps.warmup = config.replacement_steps, 0
    steps.lr = config.train.lr * 0.3  # continuing: a lower constant-then-cosine rate
    for arm, router in REPLACEMENT_ARMS:
        model = copy.deepcopy(stock_model)
        torch.manual_seed(20_000 + seed)  # a swapped-in router's initial weights
        if router is not None:
            replace_router(model, router)
        generator = torch.Generator().manual_seed(30_000 + seed)
        result = train(
            model,
            corpus,
            steps,
            config.model.length,
            generator,
            log_dir / arm.replace(" ", "_"),
            label=f"seed {seed} {arm}",
            step_offset=config.train.steps,
        )
        rows[arm] = _summary(result, measure(model, corpus, config.model.length, config.eval_sequences))
    return rows


def stored_seed(path: Path, key: dict) -> dict | None:
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    stored.get("config", {}).pop("sweep", None)
    return stored if stored.get("config") == json.loads(json.dumps(key)) else None


def run_seed(out: Path, corpus: Corpus, config: ExperimentConfig, seed: int, print_fn=print) -> dict:
    path = out / f"seed-{seed}" / "results.json"
    key = config.seed_key()
    result = stored_seed(path, key)
    if result is not None:
        print_fn(f"seed {seed}: read {path}")
    else:
        result = train_seed(out, corpus, config, seed, print_fn) | {"config": key}
    logs = out / f"seed-{seed}" / "logs"
    sweeps = not config.sweep_seeds or seed in config.sweep_seeds
    missing = [e for e in config.sweep if str(e) not in result["sweep"]] if sweeps else []
    for experts in missing:
        start = time.perf_counter()
        model_config = copy.copy(config.model)
        model_config.experts = experts
        for name in SWEEP_VARIANTS:
            if experts == config.model.experts and name in result["variants"]:  # the main table's own row
                row = result["variants"][name]
            else:
                _, row = train_variant(
                    corpus,
                    config,
                    model_config,
                    VARIANT_NAMES[name],
                    seed,
                    logs / f"E{experts}" / name.replace(" ", "_"),
                )
            result["sweep"].setdefault(str(experts), {})[name] = row
            print_fn(f"seed {seed} E={experts} {name}: held-out loss {row['measure']['loss']:.4f}")
        result.setdefault("sweep_seconds", {})[str(experts)] = time.perf_counter() - start
    write_json(path, result)
    return result


def train_seed(out: Path, corpus: Corpus, config: ExperimentConfig, seed: int, print_fn=print) -> dict:
    """Every variant and the replacement arms of one seed (the sweep: run_seed)."""
    start, cpu = time.perf_counter(), sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    logs = out / f"seed-{seed}" / "logs"
    variants, stock_model = {}, None
    for name in config.variants:
        model, variants[name] = train_variant(
            corpus, config, config.model, VARIANT_NAMES[name], seed, logs / name.replace(" ", "_")
        )
        print_fn(
            f"seed {seed} {name}: held-out loss {variants[name]['measure']['loss']:.4f}, "
            f"{variants[name]['seconds']:.0f} s"
        )
        if name == "stock (dense top-2)":
            stock_model = model
    replaced = replacement(corpus, config, stock_model, seed, logs / "replacement") if config.replacement_steps else {}
    return {
        "seed": seed,
        "variants": variants,
        "replacement": replaced,
        "sweep": {},
        "seconds": time.perf_counter() - start,
        "cpu_seconds": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu,
    }


def run_experiment(out: Path, config: ExperimentConfig, print_fn=print) -> dict:
    from redkit_experiments.spectra.overhead import overhead_table
    from redkit_experiments.spectra.report import write_spectra_report
    from redkit_experiments.spectra.tables import aggregate

    out = Path(out)
    start = time.perf_counter()
    with torch_threads(config.threads):
        corpus = build_corpus(config.corpus)
        per_seed = [run_seed(out, corpus, config, seed, print_fn) for seed in config.seeds]
        overhead = overhead_table(config.model, config.train.batch, config.overhead_repeats)
    results = {
        "experiment": "spectra",
        "config": asdict(config),
        "corpus": corpus.summary(),
        "parameters": sum(
            p.numel() for p in build_model(config.model, VARIANT_NAMES["stock (dense top-2)"], 0).parameters()
        ),
        "seeds": list(config.seeds),
        "per_seed": per_seed,
        "overhead": overhead,
        "wall_seconds": {
            "seeds": {str(r["seed"]): r["seconds"] for r in per_seed},
            "this_call": time.perf_counter() - start,
        },
        # CPU time of this process: what the run costs on a machine nobody else uses
        "cpu_seconds_this_call": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    }
    results["tables"] = aggregate(results)
    write_json(out / "results.json", results)
    write_spectra_report(out, results)
    return results
