"""A run's config grown by new domains, and the new domains' own modules trained alone.

Shared by `add-domain --data` (trained inside the new run) and `train-expert` (trained from a
bundle, in an expert directory): the same config, the same seeds, so the same weights.
"""

from dataclasses import replace
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.data import FitData
from redkit.fitting.replay_free import is_replay_free, train_domain
from redkit.lifecycle.new_labels import train_label_rows
from redkit.modules.layers import ROUTERS
from redkit.train.parallel import Step, run_chains, stage_step
from redkit.train.stages import stage_line


def new_label_owners(new: FitData, config) -> dict[str, tuple[str, ...]]:
    """{new domain: the labels it brings that the run cannot predict}: labels the run has never
    seen, and labels a removed domain took with it (masked; a domain coming back brings them again).
    A new label used by two new domains has no single owner and is refused (add one at a time)."""
    predictable = set(config.labels) - set(config.removed_labels)
    seen: dict[str, str] = {}
    for r in new.splits["train"]:
        if r.answer not in predictable:
            first = seen.setdefault(r.answer, r.domain)
            if first != r.domain:
                raise RedkitError(
                    f"{r.where}: new label {r.answer!r} occurs in new domains {first!r} and {r.domain!r}; "
                    "a new label belongs to one domain's label rows: add one domain at a time"
                )
    owners: dict[str, tuple[str, ...]] = {}
    for label in sorted(seen, key=new.labels.index):
        owners[seen[label]] = owners.get(seen[label], ()) + (label,)
    return owners


def grown_config(config, new: FitData, data_dir: Path):
    """`config` with the new domains (after the run's) and the labels they bring (after the run's,
    or masked ones unmasked), each owned by its domain's label rows."""
    owners = new_label_owners(new, config)
    brought = {label for labels in owners.values() for label in labels}
    if is_replay_free(config):  # no shared classifier outputs an old label: a new domain brings its own
        shared = next((r for r in new.splits.get("train", []) if r.answer not in brought), None)
        if shared is not None:
            raise RedkitError(
                f"{shared.where}: label {shared.answer!r} is another domain's; in a run of the replay-free recipe "
                "a new domain brings labels of its own"
            )
    return replace(
        config,
        domains=(*config.domains, *new.domains),
        labels=tuple(new.labels),
        label_domains=grown_label_domains(config, new, owners),
        label_rows=dict(config.label_rows) | owners,
        removed_labels=tuple(label for label in config.removed_labels if label not in brought),
        added_data=(*config.added_data, str(data_dir)),
        added_domains=(*config.added_domains, *(d for d in new.domains if d not in config.removed_domains)),
    )


GROWN = ("domains", "labels", "label_domains", "label_rows", "removed_labels", "added_domains")


def grown_like(config, expert_config, source: Path):
    """`config` grown as an expert's owner grew it (`train-expert` ran grown_config on a bundle of this run):
    for an expert sent without its data, whose new labels cannot be found in data here. `source`: the
    expert directory it came from (the owner's data directory is a path on the owner's machine)."""
    grown = {name: getattr(expert_config, name) for name in GROWN}
    return replace(config, **grown, added_data=(*config.added_data, str(source)))


def grown_label_domains(config, new: FitData, owners: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The one domain of each label (red_per_domain's label structure), grown by the new labels; empty
    where the run had none, or where a new domain uses a label another domain predicts."""
    if not config.label_domains:
        return ()
    brought = {label: domain for domain, labels in owners.items() for label in labels}
    if any(r.answer not in brought for r in new.splits["train"]):
        return ()  # a new domain shares a label with an old one: labels no longer belong to one domain each
    domains = dict(zip(config.labels, config.label_domains)) | brought
    return tuple(domains[label] for label in new.labels)


def new_domain_steps(run, names: tuple[str, ...]) -> tuple[list[Step], list[Step]]:
    """The new domains' own modules, each trained alone on its domain's data through the frozen
    (joined) classifier, as two independent chains: RED's (residual expert with the label rows, if
    the domain brought new labels, then the logit expert, then, for a replay-free router, the domain's
    share of the routing) and the baselines' (the full head); in a run of the replay-free recipe, each new domain's
    owner's modules (train_domain) and no baseline."""
    if is_replay_free(run.config):  # each domain's owner's modules, nothing else (redkit/fitting/replay_free.py)
        return [(lambda d=d: stage_line(f"owner {d}", train_domain(run, d))) for d in names], []
    indices = [run.space.domains.index(d) for d in names]
    red = [
        (lambda i=i: stage_line("label rows", train_label_rows(run, i)))
        for i in indices
        if run.space.domains[i] in run.config.label_rows
    ]
    router = ROUTERS[run.config.router]
    routing = [(lambda d=d: stage_line(f"routing {d}", router.owner_part(run, d))) for d in names if router.replay_free]
    return [*red, stage_step(run, "experts", domains=indices), *routing], [stage_step(run, "heads", domains=indices)]


def train_new_domains(run, names: tuple[str, ...], print_fn=print) -> None:
    """The new domains' own modules (the two chains at once, redkit/train/parallel.py)."""
    run_chains(run, list(new_domain_steps(run, names)), print_fn)
