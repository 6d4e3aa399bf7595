"""`redkit reproduce task1|task2`: data -> stages -> evaluation -> results.json + report.md."""

import time
from dataclasses import asdict
from pathlib import Path

import torch

from redkit.compositions import COMPOSITIONS, ModuleSet
from redkit.data.generate import HELDOUT
from redkit.data.expression import OPERATORS
from redkit.data.records import Example, read_jsonl
from redkit.evaluate import evaluate_compositions, routing_accuracy
from redkit.report import write_report
from redkit.run import Run, RunConfig
from redkit.train.distributed import check_run_nproc, launch_base
from redkit.train.stages import PIPELINE, STAGES

EVAL_SPLITS = ("test", HELDOUT, "val")


def structure_groups(examples: list[Example]) -> dict[str, list[str]]:
    """Per-example keys for accuracy breakdowns, where a task varies them: the number of operands
    and the operator pattern ("+-" for "12 plus 5 minus 3") of each question."""
    groups = {"operands": [str(ex.num_ops + 1) for ex in examples],
              "pattern": ["".join(ch for ch in ex.structure if ch in OPERATORS) for ex in examples]}
    return {name: keys for name, keys in groups.items() if len(set(keys)) > 1}


def evaluate_file(run: Run, modules: ModuleSet, path: Path, names: list[str]) -> dict:
    """Every composition on any JSONL file the loader reads (evaluation only, never training)."""
    examples = read_jsonl(path)
    h = run.features(f"file-{path.stem}", examples)
    classes = run.classes(examples)
    labels = torch.tensor([run.domain_label(ex) for ex in examples])
    return evaluate_compositions(modules, h, classes, labels, names, groups=structure_groups(examples))


def evaluate_run(run: Run, eval_files: tuple[Path, ...] = ()) -> dict:
    start = time.perf_counter()
    modules = ModuleSet(run)
    names = COMPOSITIONS.names()
    results = {"splits": {}, "router": {}, "gate": {}, "external": {}}
    for split in EVAL_SPLITS:
        h, classes, labels = run.split_tensors(split)
        results["splits"][split] = evaluate_compositions(modules, h, classes, labels, names,
                                                         groups=structure_groups(run.splits[split]))
    for split in ("train", "val", "test"):
        h, _, labels = run.split_tensors(split)
        results["router"][split] = routing_accuracy(modules.router(), h.to(run.device), labels)
        results["gate"][split] = routing_accuracy(modules.gate(), h.to(run.device), labels)
    for path in eval_files:
        results["external"][Path(path).name] = evaluate_file(run, modules, Path(path), names)
    run.add_time("evaluate", time.perf_counter() - start)
    return results


def train_stages(run: Run, nproc: int = 1, print_fn=print, stages: tuple[str, ...] = PIPELINE) -> None:
    """Every stage of `run` in pipeline order; stage base in `nproc` processes when nproc > 1 (the
    others train small modules on cached features, where processes would only add overhead)."""
    for stage in stages:
        outcome = launch_base(run, nproc) if stage == "base" and nproc > 1 else STAGES[stage](run)
        print_fn(f"[{stage}] {outcome if len(str(outcome)) < 200 else str(outcome)[:200] + ' ...'}")


def reproduce(out: Path, config: RunConfig, eval_files: tuple[Path, ...] = (), print_fn=print, nproc: int = 1) -> dict:
    wall = time.perf_counter()
    check_run_nproc(out, config, nproc)  # before anything is written
    run = Run(out, config)
    start = time.perf_counter()
    summary = run.prepare_data()
    if "data" not in run.timings:
        run.add_time("data", time.perf_counter() - start)
    train_stages(run, nproc, print_fn)
    results = evaluate_run(run, eval_files)
    results = run.record(results | {"task": config.task, "seed": config.seed, "config": asdict(run.config), "data": summary}, wall)
    report = write_report(run.dir, results)
    print_fn(report)
    return results
