"""`redkit add-domain`: plug one or more new domains into a finished fit run, retraining nothing else.

    <parent run>  backbone_top, C, label rows, experts and heads of its domains, global head ──copied──┐
                                                                                                      ▼
    <new run>     + the new domain's experts (residual, logit), head and, if it brings labels the run
                    has never seen, its label rows (redkit/lifecycle/new_labels.py): each trained alone
                    on its own data through the frozen classifier, here (--data) or elsewhere from a
                    bundle (--expert, made by `redkit train-expert`)
                  + router and gate over all domains (the only modules that see every domain); with a
                    training-free router (prototype, arrow) they are built from the data, not trained;
                    with the replay-free router (gaussian, redkit/routers/gaussian.py) they are built from
                    every domain's statistics module, reading no domain's data: an expert sent with its
                    modules only (`redkit train-expert --modules-only`) can then join, and `--router
                    gaussian` switches a run to it (each old domain's statistics computed from its own data)

The parent is only read; the new run (default `<parent>+<domain>`) holds the parent's data plus the
new domain's. Every copied module (the parent's, and an expert directory's) is compared by sha256
after the new run is complete; the result is printed and recorded, and a mismatch is an error.
"""

import time
from dataclasses import replace
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.data import load_fit_data
from redkit.fitting.replay_free import has_tuned_owners, is_replay_free
from redkit.lifecycle.derive import (
    check_parts,
    derive,
    domain_parts,
    finish,
    open_fit_run,
    retrain_routing,
    shared_parts,
)
from redkit.lifecycle.expert import read_expert
from redkit.lifecycle.grow import grown_config, grown_like, new_domain_steps
from redkit.modules.layers import ROUTERS
from redkit.modules.store import copy_modules
from redkit.routers.gaussian import STATISTICS


def add_domain(
    parent_dir: Path,
    data_dir: Path | None = None,
    out: Path | None = None,
    expert_dir: Path | None = None,
    router: str | None = None,
    print_fn=print,
) -> dict:
    """`router`: a ROUTERS name for the new run's router and gate (default: the parent's)."""
    wall = time.perf_counter()
    if (data_dir is None) == (expert_dir is None):
        raise RedkitError(
            "add-domain takes the new domain's data (--data) or an expert made elsewhere (--expert), one of them"
        )
    parent = open_fit_run(parent_dir, "add-domain")
    router_kind = ROUTERS[router or parent.config.router]  # an unknown name fails (did you mean) before any work
    if is_replay_free(parent.config) and not router_kind.replay_free:
        raise RedkitError(
            f"--router {router_kind.name}: trained on every domain's data; {parent.dir} is of the replay-free recipe"
        )
    parts = shared_parts(parent) + [p for d in parent.space.domains for p in domain_parts(parent, d)]
    check_parts(parent, parts)  # before anything is written
    if expert_dir is not None:
        expert = read_expert(Path(expert_dir), parent)
        new, data_dir = expert.data, Path(expert.config.added_data[-1]) if expert.data.splits else Path(expert_dir)
        if not new.splits and not router_kind.replay_free:
            raise RedkitError(
                f"{expert_dir}: an expert sent without its data can join only a run whose router is built from "
                f"each domain's own statistics (--router gaussian); {parent.dir}'s router ({router_kind.name}) "
                "is trained on every domain's data"
            )
    else:
        data_dir = Path(data_dir).resolve()
        new = load_fit_data(
            data_dir,
            parent.fields,
            parent.config.seed,
            parent.config.val_fraction,
            domains=parent.space.domains,
            labels=parent.space.labels,
            numeric_labels=parent.config.numeric_labels,
        )
    config = (
        grown_config(parent.config, new, data_dir) if new.splits else grown_like(parent.config, expert.config, data_dir)
    )
    if router and router != parent.config.router:
        config = replace(config, router=router, router_options={})
    out = Path(out) if out else parent.dir.with_name(f"{parent.dir.name}+{'+'.join(new.domains)}")
    splits = {
        name: parent.splits.get(name, []) + new.splits.get(name, [])
        for name in ("train", "val", "test")
        if name in parent.splits or name in new.splits
    }
    notes = [f"domains {', '.join(new.domains)} added from {data_dir}"] + [
        f"{', '.join(new.domains)}: {n}" for n in new.notes
    ]
    run, _, digests = derive(parent, out, config, splits, notes, parts)
    red, moe = [], []
    if expert_dir is not None:
        digests |= copy_modules(expert.run, run, [p for d in new.domains for p in domain_parts(expert.run, d)])
    else:
        red, moe = new_domain_steps(run, new.domains)
    retrain_routing(run, print_fn, red, moe)
    new_labels = {d: list(config.label_rows[d]) for d in new.domains if d in config.label_rows}
    where = f"elsewhere, from a bundle (expert directory {expert_dir})" if expert_dir else "here"
    trained = (
        f"Trained {where}, each alone on its own domain's data by the replay-free recipe: the "
        f"{'tuned top layers' if has_tuned_owners(config) else 'residual expert'}, label rows, routing statistics and "
        f"density of {', '.join(new.domains)}."
        if is_replay_free(config)
        else f"Trained {where}, each alone on its own domain's data through the frozen classifier: the experts "
        f"(residual, logit) and head of {', '.join(new.domains)}"
        + (f", and label rows for {sum(map(len, new_labels.values()))} new labels" if new_labels else "")
        + "."
    )
    statement = [
        trained,
        (
            f"Built, not trained, from the {run.space.num_domains} domains' statistics modules, each computed on its "
            f"own domain's data alone ({routing_sources(run, digests)}): the router and the gate."
            if router_kind.replay_free
            else f"Retrained over all {run.space.num_domains} domains: the router and the gate."
        ),
        f"Copied from {parent.dir}, unchanged: {len(parts)} modules ("
        + (
            "the pretrained backbone top, C over no label, the other domains' experts, label rows and routing "
            "statistics)."
            if is_replay_free(config)
            else "backbone top, classifier C, the other domains' experts, heads, label rows and routing statistics, "
            "the global head)."
        ),
    ]
    if not new.splits:
        statement.append(
            f"{', '.join(new.domains)} sent its modules only, no data: this run cannot measure its accuracy "
            "(its test examples stay with its owner)."
        )
    if new_labels:
        statement.append(
            "The new labels are output only by their domain's label rows: the old domains' heads score them "
            "as impossible, and the global heads (base_classifier = C, global_head) cannot output them at all "
            "(trained before the labels existed)."
        )
    change = {
        "operation": "add",
        "summary": f"domain(s) {', '.join(new.domains)} added",
        "domains": list(new.domains),
        "data": str(data_dir),
        "expert": str(expert_dir) if expert_dir else None,
        "new_labels": new_labels,
        "replay_free": router_kind.replay_free,
        "modules_only": not new.splits,
        "statement": statement,
    }
    results = finish(run, parent, digests, change, wall, print_fn)
    print_fn(
        f"added domain(s) {', '.join(new.domains)} to {parent.dir} as {run.dir}; the {len(digests)} copied modules "
        f"are byte-identical to their source's (sha256 of their weights): {results['lifecycle']['frozen_modules_unchanged']}"
    )
    return results


def routing_sources(run, digests: dict[str, str]) -> str:
    """Where each domain's statistics module came from: copied (the parent's, an expert's) or computed here."""
    here = [d for d in run.space.domains if f"{STATISTICS}/{d}" not in digests]
    if not here:
        return "every one copied: no domain's data read"
    return f"computed here for {', '.join(here)}; the others copied"
