"""A fit data directory read, checked and split, before anything is written to a run.

    DIR/train.jsonl|csv   required
    DIR/val.jsonl|csv     optional: else carved from train, stratified by domain, with the seed
    DIR/test.jsonl|csv    optional: else no test table (said once)
"""

import random
from dataclasses import dataclass
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.records import INTEGER, Fields, LabelReader, Record, order_labels, read_records

SPLIT_NAMES = ("train", "val", "test")


@dataclass
class FitData:
    splits: dict[str, list[Record]]  # train, val and, where given, test
    labels: tuple[str, ...]
    numeric_labels: bool
    domains: tuple[str, ...]
    notes: list[str]  # what was done that the user did not ask for (val carved, no test)


def split_file(directory: Path, name: str) -> Path | None:
    """DIR/name.jsonl or DIR/name.csv (both: an error, one of them would be ignored)."""
    found = [directory / f"{name}{ext}" for ext in (".jsonl", ".csv") if (directory / f"{name}{ext}").is_file()]
    if len(found) > 1:
        raise RedkitError(f"{directory}: both {found[0].name} and {found[1].name}; keep one")
    return found[0] if found else None


def load_fit_data(directory: Path, fields: Fields, seed: int, val_fraction: float,
                  domains: tuple[str, ...] | None = None, labels: tuple[str, ...] | None = None,
                  numeric_labels: bool = False) -> FitData:
    """Read and check every split. `domains` / `labels` / `numeric_labels`: a run's own, when adding to it:
    the data's domains are then new ones, and its labels the run's followed by those it has never
    seen (in `order_labels` order), which must be integers if the run's are (`numeric_labels`)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RedkitError(f"{directory}: no such data directory")
    train_path = split_file(directory, "train")
    if train_path is None:
        raise RedkitError(f"{directory}: no train.jsonl or train.csv")
    reader = LabelReader()
    train = read_records(train_path, fields, reader)
    found_labels, numeric = order_labels({r.answer for r in train})
    if labels is not None:
        unseen = {r.answer for r in train} - set(labels)
        added, added_numeric = order_labels(unseen) if unseen else ((), numeric_labels)
        if numeric_labels and not added_numeric:
            first = next(r for r in train if r.answer in unseen and not INTEGER.fullmatch(r.answer))
            raise RedkitError(f"{first.where}: field '{fields.label}' = {first.answer!r} is not an integer, as every label of the run is")
        found_labels, numeric = tuple(labels) + tuple(added), numeric_labels
    found_domains = tuple(sorted({r.domain for r in train}))
    for domain in found_domains:
        rows = [r for r in train if r.domain == domain]
        if len(rows) < 2:
            raise RedkitError(f"{rows[0].where}: field '{fields.domain}' = {domain!r} has {len(rows)} training example; "
                              "an expert needs at least 2 (one is held out for validation)")
        if domains is not None and domain in domains:
            raise RedkitError(f"{rows[0].where}: domain {domain!r} is already one of the run's ({', '.join(domains)})")
    notes, splits = [], {"train": train}
    val_path, test_path = split_file(directory, "val"), split_file(directory, "test")
    if val_path is None:
        splits["train"], splits["val"] = carve(train, seed, val_fraction)
        notes.append(f"no val file: {len(splits['val'])} examples of train held out for validation, stratified by domain (seed {seed})")
    else:
        splits["val"] = _checked(read_records(val_path, fields, reader), found_labels, found_domains, fields)
        missing = sorted(set(found_domains) - {r.domain for r in splits["val"]})
        if missing:
            raise RedkitError(f"{val_path}: no example of domain {missing[0]!r}; its expert could not be validated")
    if test_path is None:
        notes.append("no test file: no test table")
    else:  # a label never seen in training is allowed here: it is scored as wrong
        splits["test"] = _checked(read_records(test_path, fields, reader), None, found_domains, fields)
    return FitData(splits, found_labels, numeric, found_domains, notes)


def _checked(records: list[Record], labels: tuple[str, ...] | None, domains: tuple[str, ...], fields: Fields) -> list[Record]:
    for r in records:
        if labels is not None and r.answer not in labels:
            raise RedkitError(f"{r.where}: field '{fields.label}' = {r.answer!r} never occurs in train (validation needs known labels)")
        if r.domain not in domains:
            raise RedkitError(f"{r.where}: field '{fields.domain}' = {r.domain!r} is not a domain of train ({', '.join(domains)})")
    return records


def carve(train: list[Record], seed: int, fraction: float) -> tuple[list[Record], list[Record]]:
    """(train, val): per domain round(fraction * n) examples (at least 1, at most n - 1) drawn with
    the seed; both keep the file's order."""
    rng = random.Random(seed)
    held = set()
    for domain in sorted({r.domain for r in train}):
        pool = [i for i, r in enumerate(train) if r.domain == domain]
        held.update(rng.sample(pool, min(len(pool) - 1, max(1, round(fraction * len(pool))))))
    return [r for i, r in enumerate(train) if i not in held], [r for i, r in enumerate(train) if i in held]
