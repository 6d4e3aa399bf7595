"""`redkit reproduce task1|task2`: data -> stages -> evaluation -> results.json + report.md."""

import time
from dataclasses import asdict
from pathlib import Path

import torch

from redkit.compositions import NEEDS_DOMAIN, Composed, ModuleSet, default_compositions
from redkit.evaluate import evaluate_compositions, routing_accuracy, score_composed
from redkit.run import Run, RunConfig
from redkit.train.distributed import check_run_nproc, launch_base
from redkit.train.stages import PIPELINE, STAGES, stage_line


def evaluate_file(run: Run, modules: ModuleSet, path: Path, names: list[str]) -> dict:
    """Every composition on any file the run reads (evaluation only, never training). The oracle
    compositions are left out where a record has no domain of the run (a fit run's file may not)."""
    examples = run.read_file(path)
    labels = torch.tensor([run.domain_label(ex) for ex in examples])
    return evaluate_examples(run, modules, f"file-{path.stem}", examples, names, labels)


def evaluate_examples(run: Run, modules: ModuleSet, name: str, examples: list, names: list[str],
                      labels: torch.Tensor | None = None) -> dict:
    """{composition: metrics} of `examples` (features cached under `name`), broken down by the run's groups."""
    h = run.features(name, examples)
    labels = torch.tensor([run.domain_label(ex) for ex in examples]) if labels is None else labels
    if (labels < 0).any():
        names = [n for n in names if n not in NEEDS_DOMAIN]
    classes, groups = run.classes(examples), run.groups(examples)
    results = evaluate_compositions(modules, h, classes, labels, names, metrics=run.metrics, groups=groups,
                                    domain_accuracy=bool(run.space.labels))
    if run.config.references and run.bundle is None:  # a bundle carries RED's modules, not the references
        for reference in run.config.references:
            results[reference] = score_reference(run, reference, name, examples, labels)
    return results


def score_reference(run: Run, reference: str, name: str, examples: list, labels: torch.Tensor) -> dict:
    """A reference's (joint, linear_probe) metrics on `examples`, whose features are cached under `name`."""
    from redkit.references import REFERENCES

    composed = Composed(REFERENCES[reference].probs(run, name, [ex.question for ex in examples]), None)
    return score_composed(composed, run.classes(examples), labels, run.space, run.metrics, run.groups(examples))


def evaluate_run(run: Run, eval_files: tuple[Path, ...] = ()) -> dict:
    start = time.perf_counter()
    modules = ModuleSet(run)
    names = default_compositions(run.space)
    results = {"splits": {}, "router": {}, "gate": {}, "external": {}}
    for split in run.evaluation_splits:
        results["splits"][split] = evaluate_examples(run, modules, split, run.splits[split], names)
    for split in ("train", "val", "test"):
        if split in run.splits:
            h, _, labels = run.split_tensors(split)
            results["router"][split] = routing_accuracy(modules.router(), h.to(run.device), labels)
            results["gate"][split] = routing_accuracy(modules.gate(), h.to(run.device), labels)
    for path in eval_files:
        results["external"][Path(path).name] = evaluate_file(run, modules, Path(path), names)
    if run.oos_texts:
        from redkit.oos.evaluate import evaluate_oos

        results["oos"] = evaluate_oos(run, modules, names)
    run.add_time("evaluate", time.perf_counter() - start)
    return results


def train_stages(run: Run, nproc: int = 1, print_fn=print, stages: tuple[str, ...] = PIPELINE) -> None:
    """Every stage of `run` in pipeline order; stage base in `nproc` processes when nproc > 1 (the
    others train small modules on cached features, where processes would only add overhead)."""
    for stage in stages:
        outcome = launch_base(run, nproc) if stage == "base" and nproc > 1 else STAGES[stage](run)
        print_fn(stage_line(stage, outcome))


def reproduce(out: Path, config: RunConfig, eval_files: tuple[Path, ...] = (), print_fn=print, nproc: int = 1) -> dict:
    check_run_nproc(out, config, nproc)  # before anything is written
    return run_pipeline(Run(out, config), eval_files, print_fn, nproc=nproc)


def run_pipeline(run: Run, eval_files: tuple[Path, ...] = (), print_fn=print, summary: dict | None = None,
                 nproc: int = 1) -> dict:
    """Data (unless `summary` says it is written), every stage (base in `nproc` processes),
    evaluation, results.json, report.md."""
    wall = time.perf_counter()
    start = time.perf_counter()
    summary = summary or run.prepare_data()
    if "data" not in run.timings:
        run.add_time("data", time.perf_counter() - start)
    train_stages(run, nproc, print_fn, PIPELINE + tuple(run.config.references))
    results = evaluate_run(run, eval_files)
    config = run.config
    results = run.record(results | {"task": config.task, "seed": config.seed, "config": asdict(config), "data": summary}, wall)
    report = run.write_report(results)
    print_fn(report)
    return results
