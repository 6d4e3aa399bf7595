"""`redkit study lifecycle --run RUN`: each domain of a finished fit run taken out and put back,
against the run trained on all of them and against retraining `joint`.

For every domain d (all of the run's by default):

    RUN  ──remove-domain d──►  RUN − d   (9 domains: router and gate retrained, nothing else)
    RUN − d  ──add-domain d (data only)──►  RUN − d + d   (d's experts, head and label rows for its
                                                           labels, trained alone; router and gate)

What is shared, and what each compared system saw (said again in the report):

- The 9-domain parent of each add is RUN − d, not a fresh 9-domain fit: it shares RUN's stage base
  (tuned backbone top and classifier C) and RUN's cached features, so no add ever retrains stage
  base or re-encodes the old domains' texts. That base saw d's share of the 10 % base subset, and
  C has rows for d's labels; RUN − d masks them, and the add brings label rows for them (C's rows
  stay unused), so the added domain's labels are predicted only by modules trained alone on d.
  The add is therefore measured on features that were partly tuned with d: an optimistic setting
  for d's accuracy compared with a base that never saw it.
- RED on all domains is RUN itself; `joint` on all domains is RUN's own `joint` module, where the
  run has one. What an add is timed against is `joint` retrained on all domains in this study, on
  the same machine (the first `joint_all_retrains` added runs: their data are RUN's). `joint` on the
  9 remaining domains is retrained for the first `joint_retrains` domains only (each retrain
  fine-tunes the top layers on all of train).

Seconds are wall seconds of the whole command minus its evaluation (data written, modules copied,
features reused or encoded, modules trained).
"""

import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from redkit.atomic import write_json, write_jsonl
from redkit.errors import RedkitError
from redkit.lifecycle.add import add_domain
from redkit.lifecycle.derive import open_fit_run
from redkit.lifecycle.remove import remove_domain
from redkit.train.stages import PIPELINE
from redkit_experiments.study.lifecycle_report import lifecycle_report
from redkit_experiments.study.report import study_dir, write_study

COMPOSITIONS = ("red", "red_per_domain", "joint", "linear_probe", "global_head")  # those the run has are reported


@dataclass
class LifecycleStudyConfig:
    domains: tuple[str, ...] = ()  # () = every domain of the run
    split: str = "test"
    joint_retrains: int = 1  # 9-domain joint retrains (each costs a joint fine-tuning); 0 = none
    joint_all_retrains: int = 1  # joint retrained on all domains (an added run's data): what an add is timed against
    fresh_parents: int = (
        0  # for the first N domains, also a 9-domain RED fitted from scratch (own stage base) and d added to it
    )


def _quiet(*_args, **_kwargs) -> None:
    pass


def pooled(by_domain: dict, domains) -> float | None:
    """Accuracy over the examples of `domains` together (each domain weighted by its n)."""
    rows = [by_domain[d] for d in domains if d in by_domain]
    n = sum(r["n"] for r in rows)
    return sum(r["accuracy"] * r["n"] for r in rows) / n if n else None


def _scores(results: dict, split: str, names: list[str], domain: str, others: list[str]) -> dict:
    """{composition: {"domain": acc on `domain`, "others": pooled acc on `others`, "overall": pooled on both}}."""
    table = results["splits"][split]
    out = {}
    for name in names:
        if name in table:
            by = table[name]["by_domain"]
            out[name] = {
                "domain": by.get(domain, {}).get("accuracy"),
                "others": pooled(by, others),
                "overall": pooled(by, [domain, *others]),
            }
    return out


def _seconds(results: dict) -> float:
    return results["wall_seconds_this_call"] - results["wall_seconds_per_stage"].get("evaluate", 0.0)


def _stage_seconds(results: dict) -> dict[str, float]:
    """Seconds per training stage of a derived run (the rest of its seconds: data, copies, features)."""
    return {k: v for k, v in results["wall_seconds_per_stage"].items() if k != "evaluate"}


def _write_domain_data(run, domain: str, directory: Path) -> Path:
    """The domain's records of every split, with the run's own field names (what add-domain reads)."""
    fields = run.fields
    for name, records in run.splits.items():
        rows = [
            {fields.text: r.question, fields.label: r.answer, fields.domain: r.domain}
            for r in records
            if r.domain == domain
        ]
        if rows:
            write_jsonl(directory / f"{name}.jsonl", rows)
    return directory


def lifecycle_study(run_dir: Path, config: LifecycleStudyConfig, print_fn=print) -> dict:
    full = open_fit_run(run_dir, "study lifecycle")
    results_path = full.dir / "results.json"
    if not results_path.is_file():
        raise RedkitError(f"{results_path}: missing; finish the run first")
    full_results = full.read_results()
    domains = list(config.domains or full.space.domains)
    for d in domains:
        if d not in full.space.domains:
            raise RedkitError(f"--domain {d!r}: not a domain of {run_dir} ({', '.join(full.space.domains)})")
    if config.split not in full_results.get("splits", {}):
        raise RedkitError(f"--split {config.split!r}: {run_dir} was not evaluated on it")
    names = [n for n in COMPOSITIONS if n in full_results["splits"][config.split]]
    work = study_dir(run_dir, "lifecycle") / "runs"
    shutil.rmtree(work, ignore_errors=True)  # a resumed remove or add would time nothing: every one is redone
    timings = full_results.get("wall_seconds_per_stage", {})
    reference = {
        "red_fit_seconds": sum(timings.get(stage, 0.0) for stage in PIPELINE),  # RED's stages, not the references
        "joint_seconds": timings.get("joint"),
        "base_seconds": timings.get("base"),
        "base_fraction": full.config.base_fraction,
    }
    if reference["base_seconds"]:  # joint is stage base's recipe on all of train: an estimate, labelled as one
        reference["estimated_joint_seconds"] = reference["base_seconds"] / full.config.base_fraction
    adds, removes = [], []
    started, extra = (
        time.perf_counter(),
        0.0,
    )  # extra: seconds of joint retrains and fresh parents (outside the 20 variants)
    load = {"start": os.getloadavg()[0]}  # the machine's 1-minute load: how alone the timings were
    for index, d in enumerate(domains):
        others = [o for o in full.space.domains if o != d]
        start = time.perf_counter()
        removed = remove_domain(full.dir, d, work / f"without-{d}", print_fn=_quiet)
        without = open_fit_run(work / f"without-{d}", "study lifecycle")
        row = {
            "domain": d,
            "seconds": _seconds(removed),
            "unchanged": removed["lifecycle"]["frozen_modules_unchanged"],
            "stages": _stage_seconds(removed),
            "after": _scores(removed, config.split, names, others[0], others[1:]),
            "full": _scores(full_results, config.split, names, others[0], others[1:]),
        }
        if index < config.joint_retrains:
            row["joint_retrained"] = retrain_joint(without, config.split)
            extra += row["joint_retrained"]["seconds_with_evaluation"]
        removes.append(row)
        added = add_domain(
            without.dir,
            data_dir=_write_domain_data(full, d, work / "data" / d),
            out=work / f"readded-{d}",
            print_fn=_quiet,
        )
        adds.append(
            {
                "domain": d,
                "seconds": _seconds(added),
                "unchanged": added["lifecycle"]["frozen_modules_unchanged"],
                "stages": _stage_seconds(added),
                "label_rows": len(added["lifecycle"]["new_labels"].get(d, [])),
                "after": _scores(added, config.split, names, d, others),
                "parent": _scores(removed, config.split, names, others[0], others[1:]),
                "full": _scores(full_results, config.split, names, d, others),
            }
        )
        if index < config.joint_all_retrains:
            adds[-1]["joint_retrained"] = retrain_joint(
                open_fit_run(work / f"readded-{d}", "study lifecycle"), config.split
            )
            extra += adds[-1]["joint_retrained"]["seconds_with_evaluation"]
        if index < config.fresh_parents:
            fresh_start = time.perf_counter()
            adds[-1]["fresh"] = fresh_parent_add(full, d, work, config.split, names, others)
            extra += time.perf_counter() - fresh_start
        print_fn(
            f"[lifecycle] {d}: removed in {row['seconds']:.1f} s, added back in {adds[-1]['seconds']:.1f} s "
            f"(both {time.perf_counter() - start:.1f} s with evaluation)"
        )
        load["end"] = os.getloadavg()[0]
        total = time.perf_counter() - started
        result = {
            "config": asdict(config),
            "compositions": names,
            "domains": domains[: index + 1],
            "reference": reference,
            "study_seconds": {
                "total": total,
                "adds_and_removes": total - extra,
                "joint_retrains_and_fresh_parents": extra,
            },
            "load_average": load,
            "cpus": os.cpu_count(),
            "full_results": {n: {"overall": full_results["splits"][config.split][n]["accuracy"]} for n in names},
            "add": adds,
            "remove": removes,
        }
        write_json(work.parent / "partial.json", result)  # what is done so far, should the study be stopped
    return result


def fresh_parent_add(full, domain: str, work: Path, split: str, names: list[str], others: list[str]) -> dict:
    """The honest control of the shared base: RED fitted from scratch on the other domains (its own
    stage base, which never sees `domain`, its own features), then `domain` added to it."""
    from redkit.fitting.data import FitData
    from redkit.fitting.run import FitRun
    from redkit.pipeline import run_pipeline

    splits = {name: [r for r in records if r.domain != domain] for name, records in full.splits.items()}
    seen = {r.answer for r in splits["train"]}
    keep = [i for i, label in enumerate(full.config.labels) if label in seen]
    labels = tuple(full.config.labels[i] for i in keep)
    config = replace(
        full.config,
        domains=tuple(others),
        labels=labels,
        references=(),
        label_domains=tuple(full.config.label_domains[i] for i in keep) if full.config.label_domains else (),
    )
    run = FitRun(work / f"fresh-without-{domain}", config)
    summary = run.write_data(
        FitData(
            splits,
            labels,
            config.numeric_labels,
            config.domains,
            [f"{domain} left out of {full.dir}"],
            oos=dict(full.oos_texts),
        )
    )
    start = time.perf_counter()
    fitted = run_pipeline(run, summary=summary, print_fn=_quiet)
    fit_seconds = time.perf_counter() - start - fitted["wall_seconds_per_stage"].get("evaluate", 0.0)
    added = add_domain(run.dir, data_dir=work / "data" / domain, out=work / f"fresh-added-{domain}", print_fn=_quiet)
    return {
        "fit_seconds": fit_seconds,
        "seconds": _seconds(added),
        "label_rows": len(added["lifecycle"]["new_labels"].get(domain, [])),
        "parent": _scores(fitted, split, names, others[0], others[1:]),
        "after": _scores(added, split, names, domain, others),
    }


def retrain_joint(run, split: str) -> dict:
    """`joint` fine-tuned again on `run`'s data (the remaining domains): its seconds, and its
    accuracy on `split` overall and by domain."""
    from redkit.evaluate import score_reference
    from redkit.train.stages import STAGES

    start = time.perf_counter()
    STAGES["joint"](run)
    seconds = time.perf_counter() - start
    examples = run.splits[split]
    scores = score_reference(run, "joint", split, examples, torch.tensor([run.domain_label(ex) for ex in examples]))
    return {
        "seconds": seconds,
        "seconds_with_evaluation": time.perf_counter() - start,
        "overall": scores["accuracy"],
        "by_domain": {d: s["accuracy"] for d, s in scores.get("by_domain", {}).items()},
    }


def run_lifecycle_study(run_dir: Path, config: LifecycleStudyConfig, print_fn=print) -> dict:
    result = lifecycle_study(Path(run_dir), config, print_fn)
    directory = write_study(run_dir, "lifecycle", result, lifecycle_report)
    print_fn((directory / "report.md").read_text())
    return result
