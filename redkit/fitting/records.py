"""Someone's labelled text: JSONL or CSV (with a header row) files of text, label and domain.

    {"text": "my card was charged twice", "label": "refund", "domain": "banking"}
    text,label,domain                      <- a CSV's header row names the fields
    my card was charged twice,refund,banking

Field names default to text / label / domain (`Fields`). Labels are strings or integers and are
kept as text ("3", "refund"); a label column must be read one way throughout: `1` and `"1"`, or
`"1"` and `"01"`, in the same data are an error naming both places, since they would silently be
one class or two. Every bad line is one RedkitError naming the file, the line and the field.
"""

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redkit.errors import RedkitError
from redkit.jsonfile import jsonl_objects

INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
MAX_DIGITS = 1000  # an integer label longer than this is refused (Python converts at most 4,300 digits)


@dataclass(frozen=True)
class Fields:
    text: str = "text"
    label: str = "label"
    domain: str = "domain"


@dataclass(frozen=True)
class Record:
    """One labelled text. Named like the arithmetic Example where the stages read one (`question`
    is the text, `answer` the label), so stage base, the features and the compositions take either."""

    id: int
    question: str  # the text
    answer: str | None  # the label, as text; None where an evaluated file has none
    domain: str | None  # None where an evaluated file has none
    where: str = ""  # "file:line", for messages

    def to_json(self) -> dict:
        return {"id": self.id, "text": self.question, "label": self.answer, "domain": self.domain}


class LabelReader:
    """Turns raw label values into label texts, checking that one data set spells each number one
    way (shared by every file of a data set: train's `1` and test's `"1"` clash too)."""

    def __init__(self):
        self._spelling: dict[int, tuple[str, str]] = {}  # number -> (its spelling, where first seen)

    def __call__(self, value: Any, where: str, field: str) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise RedkitError(f"{where}: field '{field}' must be a string or an integer, got {value!r}")
        text = str(value).strip() if isinstance(value, str) else str(value)
        if not text:
            raise RedkitError(f"{where}: field '{field}' is empty")
        if isinstance(value, int) or INTEGER.fullmatch(text):
            if len(text) > MAX_DIGITS:  # int() refuses such strings, and no label needs them
                raise RedkitError(
                    f"{where}: field '{field}' is a number of {len(text)} digits; a label may have at most {MAX_DIGITS}"
                )
            spelling = repr(value) if isinstance(value, str) else text  # 1 vs '1' vs '01'
            first = self._spelling.setdefault(int(text), (spelling, where))
            if first[0] != spelling:
                raise RedkitError(
                    f"{where}: field '{field}' = {spelling} but {first[1]} has {first[0]}: a label column "
                    "must write each number one way (all integers, or all the same text)"
                )
        return text


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def read_records(
    path: Path,
    fields: Fields,
    labels: LabelReader,
    need: tuple[str, ...] = ("label", "domain"),
    skipped: list[str] | None = None,
) -> list[Record]:
    """Every record of a JSONL or CSV file. The text is always required; `need` names the other
    fields every record must have (an evaluated file may lack domains). A record whose text (or a
    needed field) is missing or empty is an error naming it, unless `skipped` is given: it is then
    left out and its place ("file:line") appended to `skipped` (`--skip-invalid`)."""
    rows = _csv_rows(path, fields) if path.suffix.lower() == ".csv" else jsonl_objects(path)
    records = []
    for where, obj in rows:
        if not isinstance(obj, dict):
            raise RedkitError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        blank = [name for name in (fields.text, *(getattr(fields, role) for role in need)) if _blank(obj.get(name))]
        if blank and skipped is not None:
            skipped.append(where)
            continue
        text = obj.get(fields.text)
        if not isinstance(text, str) or not text.strip():
            if text is None:
                raise RedkitError(f"{where}: missing text field '{fields.text}'")
            raise RedkitError(
                f"{where}: field '{fields.text}' is empty (--skip-invalid drops such records and counts them)"
                if isinstance(text, str)
                else f"{where}: field '{fields.text}' must be a string, got {text!r}"
            )
        values = {}
        for role in ("label", "domain"):
            name = getattr(fields, role)
            value = obj.get(name)
            if _blank(value):
                if role in need:
                    raise RedkitError(
                        f"{where}: missing {role} field '{name}'"
                        if value is None
                        else f"{where}: {role} field '{name}' is empty (--skip-invalid drops such records and counts them)"
                    )
                values[role] = None
            else:
                values[role] = labels(value, where, name) if role == "label" else _domain(value, where, name)
        records.append(Record(len(records), text.strip(), values["label"], values["domain"], where))
    if not records:
        raise RedkitError(f"{path}: the file holds no records")
    return records


def _domain(value: Any, where: str, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise RedkitError(f"{where}: field '{field}' must be a non-empty string, got {value!r}")
    return str(value).strip()


def _csv_rows(path: Path, fields: Fields) -> Iterator[tuple[str, dict]]:
    """('file:line', {column: value}) of every data row; the first row must be a header naming
    the text field (a file without one would read its first example as column names)."""
    if not path.is_file():
        raise RedkitError(f"{path}: no such data file")
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            if fields.text not in header:
                raise RedkitError(
                    f"{path}:1: no header row naming the fields (expected column '{fields.text}' among "
                    f"{', '.join(repr(h) for h in header) or 'nothing'}); a CSV's first row names its columns"
                )
            for row in reader:
                if any(v not in (None, "") for k, v in row.items() if k is not None):
                    yield f"{path}:{reader.line_num}", row
    except UnicodeDecodeError:
        raise RedkitError(f"{path}: not UTF-8 text") from None
    except csv.Error as err:
        raise RedkitError(f"{path}: malformed CSV ({err})") from None


def order_labels(texts: set[str]) -> tuple[tuple[str, ...], bool]:
    """The run's class order: numerically when every label is an integer, else as strings; and
    whether they are all integers (predictions then give ints back)."""
    numeric = all(INTEGER.fullmatch(t) for t in texts)
    return tuple(sorted(texts, key=int if numeric else str)), numeric
