"""One arithmetic example, and the JSONL reader that accepts redkit's files and other people's.

redkit writes `id, question, answer, label, domain, num_ops` (plus `program` and `operation`
where a task has them). The reader also takes the original authors' formats (see
the published add_operands_2_50.jsonl): `expr` instead of `question`, answers as strings,
`domain` spelled `range_2_20` or `R1`, `label`/`domain` missing (derived from the answer). A bad
line raises one `RedkitError` naming the file, the line and the field.

Answers must lie in the answer vocabulary 2..100 unless the caller says otherwise: a step of a
decomposed chain ("What is 5 minus 30?" = -25) has answers anywhere in -148..200, and a question
answered by decomposition may have any integer answer. An answer outside 2..100 has no range, so
such a record has no `label` or `domain` (None, and absent from its JSON).
"""

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redkit.errors import RedkitError
from redkit.jsonfile import jsonl_objects
from redkit_experiments.arithmetic.vocabulary import (
    DOMAIN_NAMES,
    MAX_ANSWER,
    MIN_ANSWER,
    VOCABULARY,
    domain_of,
    in_vocabulary,
    parse_domain,
)


@dataclass(frozen=True)
class Example:
    id: int
    question: str
    answer: int
    label: int | None  # range label 0..4 of the answer (its domain in Task 1/2); None outside 2..100
    num_ops: int = 1  # arithmetic operations in the question (0 when unknown)
    template: str = ""  # which template rendered it; "" for other people's files
    structure: str = ""  # operand/operator sequence, e.g. "12+27"; the split key
    program: str = ""  # step program (Task 2 / decomposer data); "" when absent
    operation: str = ""  # "add", "sub", ... for single-operation data; "" when absent

    @property
    def domain(self) -> str | None:
        return None if self.label is None else DOMAIN_NAMES[self.label]

    def to_json(self) -> dict[str, Any]:
        row = {"id": self.id, "question": self.question, "answer": self.answer}
        if self.label is not None:
            row |= {"label": self.label, "domain": self.domain}
        row["num_ops"] = self.num_ops
        extra = {k: v for k, v in asdict(self).items() if k not in row and v not in ("", None)}
        return row | extra


def _int_field(value: Any, where: str, field: str) -> int:
    # Values are quoted cut to 60 characters: a 5,000-digit number would otherwise fill the line.
    if isinstance(value, bool):
        raise RedkitError(f"{where}: field '{field}' must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip(), re.ASCII):
        try:
            return int(value.strip())
        except ValueError:  # Python refuses to convert more than 4,300 digits (CVE-2020-10735)
            raise RedkitError(
                f"{where}: field '{field}' has {len(value.strip())} digits, far too many for an integer"
            ) from None
    raise RedkitError(f"{where}: field '{field}' must be an integer, got {_short(value)}")


def _short(value: Any) -> str:
    """repr of a field's value for an error line, cut to 60 characters (a value may be a huge or
    deeply nested JSON structure, whose repr could even exceed the recursion limit)."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"a {type(value).__name__} nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."


AnswerRange = tuple[int, int] | None  # inclusive bounds an answer must lie in; None: any integer


def parse_record(obj: Any, where: str, default_id: int, answers: AnswerRange = VOCABULARY) -> Example:
    """One decoded JSON object -> Example; `where` is 'file:line' for error messages."""
    if not isinstance(obj, dict):
        raise RedkitError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    question = obj.get("question", obj.get("expr"))
    if not isinstance(question, str) or not question.strip():
        raise RedkitError(f"{where}: missing text field 'question' (or 'expr')")
    if "answer" not in obj:
        raise RedkitError(f"{where}: missing field 'answer'")
    answer = _int_field(obj["answer"], where, "answer")
    if answers is not None and not answers[0] <= answer <= answers[1]:
        what = "the vocabulary" if answers == VOCABULARY else "the answers this run can give"
        raise RedkitError(f"{where}: field 'answer' = {answer} is outside {what} {answers[0]}..{answers[1]}")
    label = domain_of(answer) if in_vocabulary(answer) else None
    # A given label or domain must agree with the answer: a mismatch means a corrupt file.
    for field in ("label", "domain"):
        if obj.get(field) is not None:
            try:
                given = parse_domain(obj[field])
            except RedkitError as err:
                raise RedkitError(f"{where}: field '{field}': {err}") from None
            if given != label:
                range_name = (
                    DOMAIN_NAMES[label] if label is not None else f"outside {MIN_ANSWER}..{MAX_ANSWER}, no range"
                )
                raise RedkitError(
                    f"{where}: field '{field}' = {_short(obj[field])} does not match answer {answer} ({range_name})"
                )
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


def read_jsonl(path: str | Path, answers: AnswerRange = VOCABULARY) -> list[Example]:
    """Read every record of a JSONL file; blank lines are skipped, anything malformed (or an
    answer outside `answers`) is an error."""
    examples = [
        parse_record(obj, where, default_id=int(where.rsplit(":", 1)[1]) - 1, answers=answers)
        for where, obj in jsonl_objects(path)
    ]
    if not examples:
        raise RedkitError(f"{path}: the file holds no records")
    return examples
