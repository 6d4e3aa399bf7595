"""`redkit reproduce digits`: the original code's MNIST 5-domain benchmark on redkit's own stages.

    base (MLP backbone + C on 10% of train) -> experts (residual and logit, each on its pair alone)
    -> heads (per-pair full heads, global head on all of train) -> router (on the pair label)
    -> gate (on the task loss) -> every composition on test (and val) -> results.json + report.md

`--run red` trains base, experts, router and evaluates the RED compositions (+ base_classifier);
`--run moe` trains base, heads, gate and evaluates the head baselines; `--run all` does both.
Finished modules are never retrained, so `--run red` then `--run all` on one --out directory only adds
what `all` has more.
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from redkit.atomic import write_text
from redkit.compositions import COMPOSITIONS, ModuleSet
from redkit.evaluate import evaluate_compositions, routing_accuracy
from redkit.metrics import classification_metrics
from redkit.threads import one_thread
from redkit.train.stages import PIPELINE, STAGES
from redkit_experiments.digits.base import stage_base
from redkit_experiments.digits.config import DigitsConfig
from redkit_experiments.digits.data import DOMAIN_OF_CLASS
from redkit_experiments.digits.report import render_report
from redkit_experiments.digits.run import DigitsRun

DIGITS_STAGES: dict[str, Callable] = {name: stage_base if name == "base" else STAGES[name] for name in PIPELINE}
EVAL_SPLITS = ("test", "val")


@dataclass(frozen=True)
class RunMode:
    stages: tuple[str, ...]  # in pipeline order
    compositions: tuple[str, ...]


RUN_MODES = {
    "red": RunMode(
        ("base", "experts", "router"), ("base_classifier", "red", "red_oracle", "red_uniform", "red_logit_experts")
    ),
    "moe": RunMode(("base", "heads", "gate"), ("base_classifier", "global_head", "oracle", "uniform", "moe")),
    "all": RunMode(PIPELINE, tuple(COMPOSITIONS.names())),
}


def _one_line(outcome: dict) -> str:
    """A stage's outcome in one line: a single module's epochs and loss, or counts over its modules."""
    if "skipped" in outcome:
        return "already trained, skipped"
    if not all(isinstance(v, dict) for v in outcome.values()):
        return ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in outcome.items() if k != "module"
        )
    trained = [v for v in outcome.values() if "skipped" not in v]
    line = f"{len(trained)} modules trained, {len(outcome) - len(trained)} already trained"
    if trained:
        epochs = [v["epochs"] for v in trained]
        line += f"; epochs {min(epochs)}..{max(epochs)}"
    return line


def evaluate_digits(run: DigitsRun, mode: RunMode) -> dict:
    """Every composition of `mode` on test and val (overall + per pair), and routing accuracy."""
    start = time.perf_counter()
    modules = ModuleSet(run)
    metrics = partial(classification_metrics, domain_of_class=DOMAIN_OF_CLASS)
    results: dict = {"splits": {}}
    for split in EVAL_SPLITS:
        h, classes, labels = run.split_tensors(split)
        results["splits"][split] = evaluate_compositions(modules, h, classes, labels, list(mode.compositions), metrics)
    for kind in ("router", "gate"):
        if kind in mode.stages:
            router, results[kind] = getattr(modules, kind)(), {}
            for split in ("train", "val", "test"):
                h, _, labels = run.split_tensors(split)
                results[kind][split] = routing_accuracy(router, h.to(run.device), labels)
    run.add_time("evaluate", time.perf_counter() - start)
    return results


def reproduce_digits(
    save_dir: Path, config: DigitsConfig, run_mode: str = "all", print_fn: Callable[[str], None] = print
) -> dict:
    """Train what `run_mode` needs (skipping finished modules), evaluate, and write results.json,
    report.md and digits.log (what was printed) under `save_dir`. Runs on one CPU thread: every
    module here is tiny (see redkit.threads)."""
    with one_thread():
        return _reproduce(save_dir, config, run_mode, print_fn)


def _reproduce(save_dir: Path, config: DigitsConfig, run_mode: str, print_fn: Callable[[str], None]) -> dict:
    wall = time.perf_counter()
    mode = RUN_MODES[run_mode]
    run = DigitsRun(save_dir, config)
    log_path = run.dir / "digits.log"

    def emit(text: str) -> None:
        print_fn(text)
        with log_path.open("a", encoding="utf-8") as f:
            f.write(text + "\n")

    emit(f"== redkit reproduce digits --run {run_mode} --out {run.dir} ({time.strftime('%Y-%m-%d %H:%M:%S')})")
    start = time.perf_counter()
    summary = run.prepare_data()
    if "data" not in run.timings:
        run.add_time("data", time.perf_counter() - start)
    emit(
        f"[data] {summary['source']['name']}, {run.source.pixels} pixels; "
        + ", ".join(f"{name} {split['count']}" for name, split in summary["splits"].items())
    )
    for stage in mode.stages:
        emit(f"[{stage}] {_one_line(DIGITS_STAGES[stage](run))}")
    results = evaluate_digits(run, mode)
    data = summary | {
        "splits": {
            name: {k: v for k, v in split.items() if k != "indices"} for name, split in summary["splits"].items()
        }
    }
    results = run.record(
        {"benchmark": "digits", "run": run_mode, "seed": run.config.seed, "config": asdict(run.config), "data": data}
        | results,
        wall,
    )
    report = render_report(results)
    write_text(run.dir / "report.md", report)
    emit(report)
    emit(f"wrote {run.dir / 'results.json'} and report.md in {results['wall_seconds_this_call']:.1f} s")
    return results
