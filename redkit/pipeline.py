"""A run end to end: its data, every stage in pipeline order, its evaluation (redkit/evaluate.py),
results.json and report.md. Every kind of run goes through `run_pipeline` (`redkit fit`, the
plug-ins' `reproduce` benchmarks)."""

import time
from dataclasses import asdict
from pathlib import Path

from redkit.evaluate import evaluate_run
from redkit.fitting.replay_free import pipeline_of
from redkit.train.distributed import launch_base
from redkit.train.stages import PIPELINE, STAGES, stage_line


def train_stages(run, nproc: int = 1, print_fn=print, stages: tuple[str, ...] = PIPELINE) -> None:
    """Every stage of `run` in pipeline order; stage base in `nproc` processes when nproc > 1 (the
    others train small modules on cached features, where processes would only add overhead)."""
    for stage in stages:
        outcome = launch_base(run, nproc) if stage == "base" and nproc > 1 else STAGES[stage](run)
        print_fn(stage_line(stage, outcome))


def run_pipeline(
    run, eval_files: tuple[Path, ...] = (), print_fn=print, summary: dict | None = None, nproc: int = 1
) -> dict:
    """Data (unless `summary` says it is written), every stage (base in `nproc` processes),
    evaluation, results.json, report.md."""
    wall = time.perf_counter()
    start = time.perf_counter()
    summary = summary or run.prepare_data()
    if "data" not in run.timings:
        run.add_time("data", time.perf_counter() - start)
    train_stages(run, nproc, print_fn, pipeline_of(run.config))
    results = evaluate_run(run, eval_files)
    config = run.config
    results = run.record(
        results | {"task": config.task, "seed": config.seed, "config": asdict(config), "data": summary}, wall
    )
    report = run.write_report(results)
    print_fn(report)
    return results
