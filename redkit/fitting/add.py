"""`redkit add-domain`: plug a new domain's expert into a finished fit run, retraining nothing else.

    <parent run>  backbone_top, classifier C, experts and heads of its domains, global head  ──copied, never retrained──┐
                                                                                                                        ▼
    <new run>     + the new domain's experts (residual, logit) and head, each trained alone on its own data through C
                  + router and gate over all domains (the only modules that see every domain); with a
                    training-free router (prototype, arrow) they are built from the data, not trained

The parent is only read; the new run (default `<parent>+<domain>`) holds the parent's data plus
the new domain's, the new domain recorded after the parent's in its config. The copied modules'
weights are compared by sha256 with the parent's after training, and the result is printed and
recorded (`frozen_modules_unchanged`). The global head stays the parent's (trained without the new domain).
"""

import time
from dataclasses import asdict, replace
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.data import FitData, load_fit_data
from redkit.fitting.run import FitRun
from redkit.open_run import open_run
from redkit.pipeline import evaluate_run
from redkit.steps.plugin import copy_modules, modules_unchanged
from redkit.train.stages import EXPERT_KINDS, STAGES


def frozen_parts(run: FitRun) -> list[tuple[str, ...]]:
    """The modules add-domain copies and must leave bit-identical."""
    return [("backbone_top",), ("classifier",), ("heads", "global_full"),
            *(("experts", kind, d) for kind in EXPERT_KINDS for d in run.space.domains), *(("heads", d) for d in run.space.domains)]


def add_domain(parent_dir: Path, data_dir: Path, out: Path | None = None, print_fn=print) -> dict:
    wall = time.perf_counter()
    parent = open_run(Path(parent_dir))
    if not isinstance(parent, FitRun):
        raise RedkitError(f"{parent_dir} is a {parent.config.task} run; add-domain plugs a domain into a fit run "
                          "(a steps run takes add-expert)")
    for p in frozen_parts(parent):  # before anything is written
        if not (parent.module_dir(*p) / "model.safetensors").is_file():
            raise RedkitError(f"{parent.module_dir(*p)}: missing; finish the parent run first (redkit fit)")
    data_dir = Path(data_dir).resolve()
    new = load_fit_data(data_dir, parent.fields, parent.config.seed, parent.config.val_fraction,
                        domains=parent.space.domains, labels=parent.space.labels)
    out = Path(out) if out else parent.dir.with_name(f"{parent.dir.name}+{'+'.join(new.domains)}")
    config = replace(parent.config, domains=(*parent.space.domains, *new.domains), added_data=(*parent.config.added_data, str(data_dir)))
    merged = FitData({name: parent.splits.get(name, []) + new.splits.get(name, []) for name in ("train", "val", "test")
                      if name in parent.splits or name in new.splits},
                     parent.space.labels, parent.config.numeric_labels, config.domains,
                     [f"domains {', '.join(new.domains)} added from {data_dir}"] + [f"{', '.join(new.domains)}: {n}" for n in new.notes])
    run = FitRun(out, config)
    summary = run.prepare_data(merged)
    digests = copy_modules(parent, run, frozen_parts(parent))
    indices = [run.space.domains.index(d) for d in new.domains]
    for stage, outcome in (("experts", STAGES["experts"](run, domains=indices)), ("heads", STAGES["heads"](run, domains=indices)),
                           ("router", STAGES["router"](run)), ("gate", STAGES["gate"](run))):
        print_fn(f"[{stage}] {outcome if len(str(outcome)) < 200 else str(outcome)[:200] + ' ...'}")
    unchanged = modules_unchanged(run, digests)
    results = evaluate_run(run)
    results = run.record(results | {"task": "fit", "seed": config.seed, "config": asdict(config), "data": summary,
                                     "added": {"parent": str(parent.dir), "domains": list(new.domains), "data": str(data_dir),
                                               "router": config.router, "frozen_modules_unchanged": unchanged,
                                               "frozen_modules": sorted(digests)}}, wall)
    print_fn(run.write_report(results))
    print_fn(f"added domain(s) {', '.join(new.domains)} to {parent.dir} as {run.dir}; the {len(digests)} copied modules "
             f"(backbone top, classifier, the other experts and heads) are byte-identical to the parent's "
             f"(sha256 of their weights): {unchanged}")
    if not unchanged:
        raise RedkitError(f"{run.dir}: a copied module changed while the new domain was added; do not trust this run")
    return results
