"""An out-of-scope file: the texts of queries that belong to none of the run's labels.

JSONL or CSV with the run's text field; a label field may be present (`oos`, or any label the run
does not have), but a label that *is* one of the run's classes means an in-scope query in the OOS
file, which would bias the threshold: one line naming the file, line and label.
"""

from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.records import Fields, LabelReader, read_records


def read_oos_file(path: Path, fields: Fields, labels: tuple[str, ...]) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise RedkitError(f"{path}: no such out-of-scope file")
    records = read_records(path, fields, LabelReader(), need=())
    known = set(labels)
    for r in records:
        if r.answer is not None and r.answer in known:
            raise RedkitError(
                f"{r.where}: field '{fields.label}' = {r.answer!r} is one of the run's in-scope labels; "
                "an out-of-scope file holds queries that belong to none of them"
            )
    return [r.question for r in records]
