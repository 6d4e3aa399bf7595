"""`redkit remove-domain`: take one domain out of a finished fit run (a customer withdraws their data).

    <parent run>  backbone_top, C, global head, the other domains' experts, heads, label rows ──copied──┐
                                                                                                      ▼
    <new run>     without the domain's experts, head, label rows and data; its own labels masked
                  (no composition predicts them); router and gate retrained over the others (a
                  training-free router is rebuilt); nothing else retrained, every copied module
                  checked by sha256

What removal cannot take back is said plainly, in the report and in results.json: the modules that
were trained on the removed domain's data and stay. Stage base (the tuned backbone top and the
classifier C) and the global head saw it if the domain was in the run when it was fitted; a domain
added later (add-domain) was never seen by them. Everything else that stays was trained alone on
another domain, or is retrained here.

A run assembled from owners' contributions (`redkit federate`) holds no example: removing a domain assembles it
again from the other owners' modules (remove_from_federation), as `redkit serve`'s DELETE /v1/domains does.
"""

import time
from dataclasses import replace
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.replay_free import is_replay_free
from redkit.lifecycle.derive import (
    check_parts,
    derive,
    domain_parts,
    finish,
    open_fit_run,
    retrain_routing,
    shared_parts,
)


def remove_domain(parent_dir: Path, domain: str, out: Path | None = None, print_fn=print) -> dict:
    wall = time.perf_counter()
    parent = open_fit_run(parent_dir, "remove-domain")
    domains = parent.space.domains
    if domain not in domains:
        raise RedkitError(f"{parent_dir}: no domain {domain!r} (its domains: {', '.join(domains)})")
    if len(domains) == 1:
        raise RedkitError(f"{parent_dir}: {domain!r} is the run's only domain; a run without domains predicts nothing")
    if parent.assembled:  # an owner opts out of a federation's run: assembled again without it, as `redkit serve` does
        return remove_from_federation(parent, domain, out, print_fn)
    kept = tuple(d for d in domains if d != domain)
    parts = shared_parts(parent) + [p for d in kept for p in domain_parts(parent, d)]
    check_parts(parent, parts)  # before anything is written
    train = parent.splits["train"]
    still = {r.answer for r in train if r.domain in kept}
    gone = sorted({r.answer for r in train if r.domain == domain} - still, key=parent.space.label_index.get)
    config = replace(
        parent.config,
        domains=kept,
        label_rows={d: rows for d, rows in parent.config.label_rows.items() if d != domain},
        removed_labels=(*parent.config.removed_labels, *gone),
        removed_domains=(*parent.config.removed_domains, domain),
    )
    out = Path(out) if out else parent.dir.with_name(f"{parent.dir.name}-{domain}")
    splits = {name: [r for r in records if r.domain != domain] for name, records in parent.splits.items()}
    notes = [
        f"domain {domain} removed from {parent.dir}: {sum(r.domain == domain for r in records)} {name} examples dropped"
        for name, records in parent.splits.items()
    ]
    run, _, digests = derive(parent, out, config, splits, notes, parts)
    retrain_routing(run, print_fn)
    # a run of the replay-free recipe trained nothing on pooled data: no remaining module saw the domain's
    seen_at_fit = domain not in parent.config.added_domains and not is_replay_free(parent.config)
    carriers = [
        "backbone_top (stage base)",
        "classifier C (stage base)",
        "heads/global_full (the global head, all of train)",
    ]
    statement = [
        f"Removed: the {'residual expert, routing statistics' if is_replay_free(parent.config) else 'experts (residual, logit), head'}"
        f"{', label rows' if domain in parent.config.label_rows else ''} "
        f"and data of {domain}; its {len(gone)} own labels are masked (no composition predicts them"
        + (f": {', '.join(gone[:8])}{', ...' if len(gone) > 8 else ''}" if gone else "")
        + ").",
        f"Retrained over the {len(kept)} remaining domains, on their data only: the router and the gate.",
        "Trained alone on another domain's data, so untouched by it: every remaining expert, head and label rows.",
    ]
    if seen_at_fit:
        statement.append(
            f"Still trained on {domain}'s data, and copied unchanged (removal cannot take that back; only a "
            f"new fit without it can): {', '.join(carriers)}."
        )
    elif is_replay_free(parent.config):
        statement.append(
            f"The run is of the replay-free recipe: every remaining module was trained on its own domain's data "
            f"alone (or on none), so no remaining module was trained on {domain}'s."
        )
    else:
        statement.append(
            f"{domain} was added after the run was fitted (add-domain): stage base and the global head never saw its data, "
            "so no remaining module was trained on it."
        )
    change = {
        "operation": "remove",
        "summary": f"domain {domain} removed",
        "domains": [domain],
        "masked_labels": gone,
        "still_trained_on_removed_data": carriers if seen_at_fit else [],
        "statement": statement,
    }
    results = finish(run, parent, digests, change, wall, print_fn)
    print_fn(
        f"removed domain {domain} from {parent.dir} as {run.dir}; the {len(digests)} copied modules are byte-identical "
        f"to the parent's (sha256 of their weights): {results['lifecycle']['frozen_modules_unchanged']}"
    )
    return results


def remove_from_federation(parent, domain: str, out: Path | None, print_fn=print) -> dict:
    """A run assembled from owners' contributions (redkit federate) holds no example to derive a run from: it is
    assembled again from the other owners' modules (redkit/federated/assemble.py, as `redkit serve`'s DELETE
    /v1/domains does); refused in one line where the owners' scatters were summed securely."""
    from redkit.federated.assemble import assemble, contributions_of, refuse_secure, without

    plan, accepted = contributions_of(parent.dir)
    refuse_secure(plan, f"{parent.dir}: domain {domain!r} cannot be removed")
    out = Path(out) if out else parent.dir.with_name(f"{parent.dir.name}-{domain}")
    run = assemble(plan, without(accepted, domain), out, print_fn)
    print_fn(f"removed domain {domain} from {parent.dir} as {run.dir}: assembled again from the other owners' modules")
    return {"run": str(run.dir), "domains": list(run.space.domains)}
