"""One arithmetic example, and the JSONL reader that accepts redkit's files and other people's.

redkit writes `id, question, answer, label, domain, num_ops` (plus `program` and `operation`
where a task has them). The reader also takes the original authors' formats (see
`../shared/external/red-original/SOURCE.md`): `expr` instead of `question`, answers as strings,
`domain` spelled `range_2_20` or `R1`, `label`/`domain` missing (derived from the answer). A bad
line raises one `RedkitError` naming the file, the line and the field.
"""

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redkit.data.vocabulary import DOMAIN_NAMES, domain_of, in_vocabulary, parse_domain, MIN_ANSWER, MAX_ANSWER
from redkit.errors import RedkitError


@dataclass(frozen=True)
class Example:
    id: int
    question: str
    answer: int
    label: int  # range label 0..4 of the answer: the example's domain
    num_ops: int = 1  # arithmetic operations in the question (0 when unknown)
    template: str = ""  # which template rendered it; "" for other people's files
    structure: str = ""  # operand/operator sequence, e.g. "12+27"; the split key
    program: str = ""  # step program (Task 2 / decomposer data); "" when absent
    operation: str = ""  # "add", "sub", ... for single-operation data; "" when absent

    @property
    def domain(self) -> str:
        return DOMAIN_NAMES[self.label]

    def to_json(self) -> dict[str, Any]:
        row = {"id": self.id, "question": self.question, "answer": self.answer, "label": self.label,
               "domain": self.domain, "num_ops": self.num_ops}
        extra = {k: v for k, v in asdict(self).items() if k not in row and v != ""}
        return row | extra


def _int_field(value: Any, where: str, field: str) -> int:
    if isinstance(value, bool):
        raise RedkitError(f"{where}: field '{field}' must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip(), re.ASCII):
        return int(value.strip())
    raise RedkitError(f"{where}: field '{field}' must be an integer, got {value!r}")


def parse_record(obj: Any, where: str, default_id: int) -> Example:
    """One decoded JSON object -> Example; `where` is 'file:line' for error messages."""
    if not isinstance(obj, dict):
        raise RedkitError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    question = obj.get("question", obj.get("expr"))
    if not isinstance(question, str) or not question.strip():
        raise RedkitError(f"{where}: missing text field 'question' (or 'expr')")
    if "answer" not in obj:
        raise RedkitError(f"{where}: missing field 'answer'")
    answer = _int_field(obj["answer"], where, "answer")
    if not in_vocabulary(answer):
        raise RedkitError(f"{where}: field 'answer' = {answer} is outside the vocabulary {MIN_ANSWER}..{MAX_ANSWER}")
    label = domain_of(answer)
    # A given label or domain must agree with the answer: a mismatch means a corrupt file.
    for field in ("label", "domain"):
        if field in obj:
            try:
                given = parse_domain(obj[field])
            except RedkitError as err:
                raise RedkitError(f"{where}: field '{field}': {err}") from None
            if given != label:
                raise RedkitError(f"{where}: field '{field}' = {obj[field]!r} does not match answer {answer} ({DOMAIN_NAMES[label]})")
    num_ops = _int_field(obj.get("num_ops", obj.get("num_steps", 0)), where, "num_ops")
    return Example(
        id=_int_field(obj.get("id", default_id), where, "id"),
        question=question.strip(),
        answer=answer,
        label=label,
        num_ops=num_ops,
        template=str(obj.get("template", "")),
        structure=str(obj.get("structure", "")),
        program=str(obj.get("program", "")),
        operation=str(obj.get("operation", "")),
    )


def read_jsonl(path: str | Path) -> list[Example]:
    """Read every record of a JSONL file; blank lines are skipped, anything malformed is an error."""
    path = Path(path)
    if not path.is_file():
        raise RedkitError(f"{path}: no such data file")
    examples = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            where = f"{path}:{line_no}"
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError:
                raise RedkitError(f"{where}: not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise RedkitError(f"{where}: malformed JSON ({err.msg} at column {err.colno})") from None
            examples.append(parse_record(obj, where, default_id=line_no - 1))
    if not examples:
        raise RedkitError(f"{path}: the file holds no records")
    return examples
