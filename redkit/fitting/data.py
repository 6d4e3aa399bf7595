"""A fit data directory read, checked and split, before anything is written to a run.

DIR/train.jsonl|csv   required
DIR/val.jsonl|csv     optional: else carved from train, stratified by domain, with the seed
DIR/test.jsonl|csv    optional: else no test table (said once)
"""

import random
from dataclasses import dataclass, field
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.records import INTEGER, Fields, LabelReader, Record, order_labels, read_records
from redkit.names import check_name

SPLIT_NAMES = ("train", "val", "test")


@dataclass
class FitData:
    splits: dict[str, list[Record]]  # train, val and, where given, test
    labels: tuple[str, ...]
    numeric_labels: bool
    domains: tuple[str, ...]
    notes: list[str]  # what was done that the user did not ask for (val carved, no test)
    oos: dict[str, list[str]] = field(default_factory=dict)  # out-of-scope texts: oos_val (threshold), oos_test


def split_file(directory: Path, name: str) -> Path | None:
    """DIR/name.jsonl or DIR/name.csv (both: an error, one of them would be ignored)."""
    found = [directory / f"{name}{ext}" for ext in (".jsonl", ".csv") if (directory / f"{name}{ext}").is_file()]
    if len(found) > 1:
        raise RedkitError(f"{directory}: both {found[0].name} and {found[1].name}; keep one")
    return found[0] if found else None


def load_fit_data(
    directory: Path,
    fields: Fields,
    seed: int,
    val_fraction: float,
    domains: tuple[str, ...] | None = None,
    labels: tuple[str, ...] | None = None,
    numeric_labels: bool = False,
    skip_invalid: bool = False,
) -> FitData:
    """Read and check every split. `domains` / `labels` / `numeric_labels`: a run's own, when adding to it:
    the data's domains are then new ones, and its labels the run's followed by those it has never
    seen (in `order_labels` order), which must be integers if the run's are (`numeric_labels`).
    `skip_invalid`: records with an empty text, label or domain are left out and counted in the notes."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RedkitError(f"{directory}: no such data directory")
    train_path = split_file(directory, "train")
    if train_path is None:
        raise RedkitError(f"{directory}: no train.jsonl or train.csv")
    reader = LabelReader()
    skipped: list[str] | None = [] if skip_invalid else None
    train = read_records(train_path, fields, reader, skipped=skipped)
    found_labels, numeric = order_labels({r.answer for r in train})
    if labels is not None:
        unseen = {r.answer for r in train} - set(labels)
        added, added_numeric = order_labels(unseen) if unseen else ((), numeric_labels)
        if numeric_labels and not added_numeric:
            first = next(r for r in train if r.answer in unseen and not INTEGER.fullmatch(r.answer))
            raise RedkitError(
                f"{first.where}: field '{fields.label}' = {first.answer!r} is not an integer, as every label of the run is"
            )
        found_labels, numeric = tuple(labels) + tuple(added), numeric_labels
    found_domains = tuple(sorted({r.domain for r in train}))
    for domain in found_domains:
        rows = [r for r in train if r.domain == domain]
        # Each domain becomes module folders (modules/experts/residual/<domain>, ...): refused here, at
        # its first line, before anything is written, if it is a path or another module's folder.
        check_name(
            domain, "domain" if fields.domain == "domain" else f"domain (field '{fields.domain}')", rows[0].where
        )
        if len(rows) < 2:
            raise RedkitError(
                f"{rows[0].where}: field '{fields.domain}' = {domain!r} has {len(rows)} training example; "
                "an expert needs at least 2 (one is held out for validation)"
            )
        if domains is not None and domain in domains:
            raise RedkitError(f"{rows[0].where}: domain {domain!r} is already one of the run's ({', '.join(domains)})")
    notes, splits = [], {"train": train}
    val_path, test_path = split_file(directory, "val"), split_file(directory, "test")
    if val_path is None:
        splits["train"], splits["val"] = carve(train, seed, val_fraction)
        notes.append(
            f"no val file: {len(splits['val'])} examples of train held out for validation, stratified by domain (seed {seed})"
        )
    else:
        splits["val"] = _checked(
            read_records(val_path, fields, reader, skipped=skipped), found_labels, found_domains, fields
        )
        missing = sorted(set(found_domains) - {r.domain for r in splits["val"]})
        if missing:
            raise RedkitError(f"{val_path}: no example of domain {missing[0]!r}; its expert could not be validated")
    if test_path is None:
        notes.append("no test file: no test table")
    else:  # a label never seen in training is allowed here: it is scored as wrong
        splits["test"] = _checked(read_records(test_path, fields, reader, skipped=skipped), None, found_domains, fields)
    if skipped:
        shown = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        notes.append(
            f"--skip-invalid: {len(skipped)} record{'s' if len(skipped) > 1 else ''} with an empty text, label "
            f"or domain left out ({shown})"
        )
    return FitData(splits, found_labels, numeric, found_domains, notes)


def clinc150_fit_data(directory: Path) -> FitData:
    """CLINC150's in-scope splits as a fit run's data; its oos_val and oos_test kept apart as texts
    (oos_train is read and checked, never used: the oos-threshold protocol trains on no OOS query)."""
    from redkit.data.clinc150 import read_clinc150

    data = read_clinc150(directory)
    notes = [
        f"CLINC150: {len(data.intents)} in-scope intents in {len(data.domains)} domains; out-of-scope queries "
        f"({', '.join(f'{s} {len(t)}' for s, t in data.oos.items())}) are kept apart for the oos-threshold protocol "
        "and never trained on"
    ]
    oos = {name: texts for name, texts in data.oos.items() if name != "oos_train"}
    return FitData(dict(data.splits), data.intents, False, data.domains, notes, oos)


def load_run_data(
    directory: Path,
    data_format: str,
    fields: Fields,
    seed: int,
    val_fraction: float,
    oos_file: Path | None = None,
    skip_invalid: bool = False,
) -> FitData:
    """A fit run's data, whatever its format: a directory of files ("files") or CLINC150 as its
    authors published it ("clinc150", whose out-of-scope splits come along); `oos_file` adds (or
    replaces) the out-of-scope validation texts the OOS threshold is chosen on."""
    if data_format == "clinc150":
        data = clinc150_fit_data(directory)
    elif data_format == "files":
        data = load_fit_data(directory, fields, seed, val_fraction, skip_invalid=skip_invalid)
    else:
        raise RedkitError(f"data format {data_format!r} is not one of: files, clinc150")
    if oos_file is not None:
        from redkit.oos.data import read_oos_file

        data.oos["oos_val"] = read_oos_file(Path(oos_file), fields, data.labels)
    return data


def label_domains(data: FitData) -> tuple[str, ...]:
    """The one domain of each label in train, in label order; empty where some label has several."""
    seen: dict[str, set[str]] = {}
    for r in data.splits["train"]:
        seen.setdefault(r.answer, set()).add(r.domain)
    if any(len(domains) > 1 for domains in seen.values()):
        return ()
    return tuple(next(iter(seen[label])) for label in data.labels)


def _checked(
    records: list[Record], labels: tuple[str, ...] | None, domains: tuple[str, ...], fields: Fields
) -> list[Record]:
    for r in records:
        if labels is not None and r.answer not in labels:
            raise RedkitError(
                f"{r.where}: field '{fields.label}' = {r.answer!r} never occurs in train (validation needs known labels)"
            )
        if r.domain not in domains:
            raise RedkitError(
                f"{r.where}: field '{fields.domain}' = {r.domain!r} is not a domain of train ({', '.join(domains)})"
            )
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
