"""What one domain's owner reads of a fit run: that domain's own examples, and nobody else's (the replay-free
recipe's every owner: replay_free.py, tuned_owners.py)."""

import torch

from redkit.errors import RedkitError
from redkit.modules.store import module_exists


def pending_owner(run, domain: str, parts) -> tuple[dict, tuple[str, ...]] | None:
    """({part: its directory} of `domain`'s modules, the domain's own labels), or None where every one of its modules
    exists (nothing to train: a rerun resumes); one line where the domain brings no label of its own."""
    dirs = {part: run.module_dir(*part, domain) for part in parts}
    if all(module_exists(path) for path in dirs.values()):
        return None
    labels = tuple(run.config.label_rows.get(domain, ()))
    if not labels:
        raise RedkitError(f"{run.dir}: domain {domain!r} brings no label of its own (config label_rows)")
    return dirs, labels


def domain_records(run, domain: str, split: str, labels: tuple[str, ...]) -> list:
    """`domain`'s examples of `split` alone; one line where it has none or one carries another domain's label."""
    records = [r for r in run.splits.get(split, []) if r.domain == domain]
    if not records:
        raise RedkitError(f"{run.dir}: domain {domain!r} has no {split} example; its owner cannot train alone")
    outside = next((r for r in records if r.answer not in labels), None)
    if outside is not None:
        raise RedkitError(
            f"{outside.where}: label {outside.answer!r} of domain {domain!r} is another domain's; in the replay-free "
            "recipe a domain brings labels of its own"
        )
    return records


def domain_examples(run, domain: str, split: str, labels: tuple[str, ...]) -> tuple[list[str], torch.Tensor]:
    """(texts, y (N,)) of `domain`'s examples of `split` alone, y indexing `labels` (its rows')."""
    records = domain_records(run, domain, split, labels)
    return [r.question for r in records], torch.tensor([labels.index(r.answer) for r in records])
