"""What adding and removing a domain share: a new run derived from a finished one.

    parent run (only read) ──► new run: its config (domains, labels changed), its data (records
    added or dropped), the modules that stay copied (then checked by sha256), the features of the
    parent's texts reused (same tuned backbone: the same numbers), router and gate retrained over
    the new set of domains, every composition evaluated, and a report of before vs after.

Only the texts training reads (train, val) are encoded before training; a new domain's test and
out-of-scope texts are encoded when the new run is evaluated, and their seconds are evaluation's.
"""

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import torch

from redkit.atomic import write_text
from redkit.errors import RedkitError
from redkit.evaluate import evaluate_run
from redkit.features import encode, features_path, store_features
from redkit.fitting.data import FitData
from redkit.fitting.records import Record
from redkit.fitting.replay_free import HOST_PARTS, has_tuned_owners, is_replay_free
from redkit.fitting.replay_free import domain_parts as owner_parts
from redkit.fitting.run import FitRun
from redkit.modules.store import copy_modules, module_exists, modules_unchanged
from redkit.report import markdown_table
from redkit.routers.gaussian import STATISTICS
from redkit.run import open_run
from redkit.train.parallel import Step, run_chains, stage_step
from redkit.train.stages import EXPERT_KINDS

COMPARED = (
    "red",
    "red_per_domain",
    "red_oracle",
    "moe",
    "global_head",
    "base_classifier",
)  # in the before/after table, where present
TRAINING_SETS = ("train", "val")  # what the retrained modules read; the rest only evaluation reads


def open_fit_run(path: Path, command: str) -> FitRun:
    run = open_run(Path(path))
    if not isinstance(run, FitRun):
        raise RedkitError(f"{path} is a {run.config.task} run; {command} works on a fit run (redkit fit)")
    if run.bundle is not None:
        run.refuse_in_bundle(command)
    return run


def domain_parts(run: FitRun, domain: str) -> list[tuple[str, ...]]:
    """The modules that belong to one domain: its experts, its head, if it brought new labels its label rows
    and, where a replay-free router has one, its share of the routing (redkit/routers/gaussian.py); in a run of
    the replay-free recipe, what its owner built (redkit/fitting/replay_free.py: domain_parts)."""
    if is_replay_free(run.config):
        return [(*part, domain) for part in owner_parts(run.config)]
    return [
        *(("experts", kind, domain) for kind in EXPERT_KINDS),
        ("heads", domain),
        *([("label_rows", domain)] if domain in run.config.label_rows else []),
        *([(STATISTICS, domain)] if module_exists(run.module_dir(STATISTICS, domain)) else []),
    ]


def shared_parts(run: FitRun) -> list[tuple[str, ...]]:
    """The modules every domain shares and no life-cycle change retrains (router and gate are retrained)."""
    if is_replay_free(run.config):
        return list(HOST_PARTS)
    return [("backbone_top",), ("classifier",), ("heads", "global_full")]


def check_parts(run: FitRun, parts: list[tuple[str, ...]]) -> None:
    """Every module to copy exists (before anything is written)."""
    for p in parts:
        if not (run.module_dir(*p) / "model.safetensors").is_file():
            raise RedkitError(f"{run.module_dir(*p)}: missing; finish the parent run first (redkit fit)")


def derive(
    parent: FitRun, out: Path, config, splits: dict[str, list[Record]], notes: list[str], parts: list[tuple[str, ...]]
) -> tuple[FitRun, dict, dict[str, str]]:
    """The new run at `out`: config, data, copied modules (their parent sha256 returned, by path)
    and the parent's features, reused for the texts they share."""
    # The references (joint, linear_probe) are not part of the modular predictor: retraining them is
    # what the life cycle avoids, so a derived run has none (the parent's stay the parent's).
    config = replace(config, references=())
    data = FitData(
        splits, tuple(config.labels), config.numeric_labels, tuple(config.domains), notes, oos=dict(parent.oos_texts)
    )
    run = FitRun(out, config)
    summary = run.prepare_data(data)
    digests = copy_modules(parent, run, parts)
    reuse_features(run, parent, TRAINING_SETS)
    return run, summary, digests


def _texts(run: FitRun) -> dict[str, list[str]]:
    """Every text list a run encodes, by cache name: its splits and its out-of-scope sets."""
    return {name: [r.question for r in records] for name, records in run.splits.items()} | dict(run.oos_texts)


def reuse_features(run: FitRun, donor: FitRun, names: tuple[str, ...] | None = None) -> None:
    """Write the feature cache of `run`'s text sets `names` (default: every split and out-of-scope
    set) from the donor's features (same tuned backbone, so the same numbers), encoding only the
    texts the donor does not have (a new domain's). Not for a run of tuned owners: its features are its owners' top
    layers' outputs, which a domain added or removed changes (its owners train on the pretrained features, cached
    by name; redkit/fitting/tuned_owners.py)."""
    if donor.fingerprint != run.fingerprint or has_tuned_owners(run.config):
        return
    known: dict[str, torch.Tensor] = {}
    for name, texts in _texts(donor).items():
        known.update(zip(texts, donor.features(name, [SimpleNamespace(question=t) for t in texts])))
    for name, texts in _texts(run).items():
        if names is not None and name not in names:
            continue
        path = features_path(run.cache_dir, run.backbone, texts, name)
        if path.is_file():
            continue
        # In the set's own order, as `cached_features` encodes a run holding only these texts: the
        # batches, hence the padding and the last bits of each feature, are the ones train-expert gets.
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            known.update(zip(missing, encode(run.backbone, missing, desc=f"encode new {name}")))
        store_features(path, torch.stack([known[t] for t in texts]) if texts else torch.empty(0, run.feature_dim))


def retrain_routing(run: FitRun, print_fn=print, red: list[Step] = (), moe: list[Step] = ()) -> None:
    """Router and gate over the run's domains: the only modules that see every domain (a
    training-free router kind is rebuilt from the data instead). The router ends RED's chain of
    steps (`red`: a new domain's experts), the gate the baselines' (`moe`: its head, which the
    gate mixes); the two chains run at once (redkit/train/parallel.py), but in a run of tuned owners, whose gate
    reads every owner's top layers' outputs: there it follows the router, once the new owners are trained."""
    chains = [[*red, stage_step(run, "router")], [*moe, stage_step(run, "gate")]]
    run_chains(run, [chains[0] + chains[1]] if has_tuned_owners(run.config) else chains, print_fn)


def finish(run: FitRun, parent: FitRun, digests: dict[str, str], change: dict, wall: float, print_fn=print) -> dict:
    """Check the copied modules, evaluate, record results.json (`change` under "lifecycle") and
    write the report (the fit report followed by the change's own section)."""
    unchanged = modules_unchanged(run, digests)
    start = time.perf_counter()
    reuse_features(
        run, parent
    )  # the sets only evaluation reads (test, out-of-scope): encoding them is evaluation's cost
    run.add_time("evaluate", time.perf_counter() - start)
    results = evaluate_run(run)
    parent_results = parent.dir / "results.json"
    before = json.loads(parent_results.read_text()) if parent_results.is_file() else {}
    change = change | {
        "parent": str(parent.dir),
        "router": run.config.router,
        "frozen_modules_unchanged": unchanged,
        "frozen_modules": {p: d for p, d in sorted(digests.items())},
        "before_after": before_after(before, results, parent.space.domains, run.space.domains),
    }
    results = run.record(
        results
        | {
            "task": "fit",
            "seed": run.config.seed,
            "config": asdict(run.config),
            "data": json.loads((run.dir / "data" / "splits.json").read_text()),
            "lifecycle": change,
        },
        wall,
    )
    report = run.write_report(results)
    section = render_change(change)
    write_text(run.dir / "report.md", report + "\n" + section)
    print_fn(section)
    if not unchanged:
        raise RedkitError(f"{run.dir}: a copied module changed while the run was derived; do not trust this run")
    return results


def before_after(before: dict, after: dict, old: tuple[str, ...], new: tuple[str, ...]) -> dict:
    """Per split and composition: {domain: [accuracy in the parent or None, accuracy now or None]}."""
    table = {}
    for split, comps in after.get("splits", {}).items():
        parent = before.get("splits", {}).get(split, {})
        for name in COMPARED:
            if name not in comps:
                continue
            rows = {}
            for domain in dict.fromkeys((*old, *new)):
                was = parent.get(name, {}).get("by_domain", {}).get(domain, {}).get("accuracy")
                now = comps[name].get("by_domain", {}).get(domain, {}).get("accuracy")
                rows[domain] = [was, now]
            table.setdefault(split, {})[name] = rows
    return table


def _f(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def render_change(change: dict) -> str:
    out = [
        f"## Life cycle: {change['summary']}",
        "",
        *change["statement"],
        "",
        f"Copied modules byte-identical to the parent's (sha256 of their weights): **{change['frozen_modules_unchanged']}**",
        "",
    ]
    out += (
        ["| module | sha256 |", "| --- | --- |"]
        + [f"| {p} | `{d[:16]}…` |" for p, d in change["frozen_modules"].items()]
        + [""]
    )
    for split, comps in change["before_after"].items():
        domains = list(next(iter(comps.values())))
        out += [
            f"### Accuracy by domain before → after ({split})",
            "",
            markdown_table(
                ["Composition", *domains],
                [[name, *(f"{_f(b)} → {_f(a)}" for b, a in rows.values())] for name, rows in comps.items()],
            ),
            "",
        ]
    return "\n".join(out)
