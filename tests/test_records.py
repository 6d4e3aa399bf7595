"""The JSONL loader: redkit's own files, the original authors' formats, and clear errors that name
the file, the line and the field."""

import json
from pathlib import Path

import pytest

from redkit.errors import RedkitError
from redkit_experiments.arithmetic.generate import DataConfig, generate, write_dataset
from redkit_experiments.arithmetic.records import Example, read_jsonl
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.arithmetic.vocabulary import DOMAIN_NAMES, MAX_ANSWER, MIN_ANSWER, domain_of

RED_ORIGINAL = Path(__file__).resolve().parents[1].parent / "shared" / "external" / "red-original"


def write_lines(path: Path, lines: list) -> Path:
    """Each item is a dict (written as JSON) or a str (written verbatim)."""
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8"
    )
    return path


def read_one(tmp_path: Path, record: dict) -> Example:
    [example] = read_jsonl(write_lines(tmp_path / "one.jsonl", [record]))
    return example


def error_of(path: Path) -> str:
    with pytest.raises(RedkitError) as err:
        read_jsonl(path)
    message = str(err.value)
    assert "\n" not in message, "a user error is one line"
    return message


# ---- redkit's own files ---------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS.names())
def test_own_files_round_trip(tmp_path, task):
    """Whatever a task writes (decomposer renames fields to the paper's) reads back unchanged."""
    config = DataConfig(task=task, n=100, seed=3, split="random")
    datasets = generate(config)
    write_dataset(tmp_path, datasets, config)
    for split, examples in datasets.items():
        assert read_jsonl(tmp_path / f"{split}.jsonl", answers=None) == examples, (
            split
        )  # operation steps answer -148..200


# ---- the original authors' formats ------------------------------------------------------------------


def test_question_and_int_answer_only(tmp_path):
    ex = read_one(tmp_path, {"question": "What is 7 plus 4?", "answer": 11})
    assert (ex.question, ex.answer, ex.label, ex.domain) == ("What is 7 plus 4?", 11, 0, "range_2_20")
    assert ex.num_ops == 0 and ex.program == "" and ex.template == ""


def test_string_answer(tmp_path):
    ex = read_one(tmp_path, {"question": "What is 50 plus 45?", "answer": "95"})
    assert ex.answer == 95 and ex.label == 4


def test_expr_instead_of_question(tmp_path):
    ex = read_one(tmp_path, {"expr": "33 plus 23", "answer": 56, "operation": "add"})
    assert (ex.question, ex.answer, ex.label, ex.operation) == ("33 plus 23", 56, 2, "add")


def test_question_is_preferred_to_expr(tmp_path):
    ex = read_one(tmp_path, {"question": "What is 4 plus 3?", "expr": "4 plus 3", "answer": 7, "operation": "add"})
    assert ex.question == "What is 4 plus 3?"


@pytest.mark.parametrize("domain", ["range_61_80", "R4", "r4", "3", 3])
def test_domain_spellings(tmp_path, domain):
    ex = read_one(tmp_path, {"question": "What is 103 minus 42?", "answer": 61, "domain": domain})
    assert ex.label == 3 and ex.domain == "range_61_80"


def test_paper_record_with_num_steps(tmp_path):
    record = {
        "id": 14962,
        "question": "What is 103 minus 42?",
        "answer": 61,
        "label": 3,
        "domain": "range_61_80",
        "num_steps": 2,
        "program": "Step 1: 103 - 42 = x1\nAnswer: x1",
    }
    ex = read_one(tmp_path, record)
    assert (ex.id, ex.answer, ex.label, ex.num_ops) == (14962, 61, 3, 2)
    assert ex.program == "Step 1: 103 - 42 = x1\nAnswer: x1"


@pytest.mark.parametrize(
    "answer, label", [(2, 0), (20, 0), (21, 1), (40, 1), (41, 2), (60, 2), (61, 3), (80, 3), (81, 4), (100, 4)]
)
def test_missing_label_is_derived_from_the_answer(tmp_path, answer, label):
    ex = read_one(tmp_path, {"question": "q?", "answer": answer})
    assert ex.label == label and ex.domain == DOMAIN_NAMES[label]


def test_missing_ids_are_line_numbers_and_blank_lines_are_skipped(tmp_path):
    path = write_lines(
        tmp_path / "ids.jsonl", [{"question": "a?", "answer": 5}, "", "   ", {"question": "b?", "answer": 50}]
    )
    examples = read_jsonl(path)
    assert [ex.id for ex in examples] == [0, 3]
    assert [ex.answer for ex in examples] == [5, 50]


@pytest.mark.skipif(not RED_ORIGINAL.is_dir(), reason=f"{RED_ORIGINAL} is absent (forks may not have it)")
@pytest.mark.parametrize("name", sorted(p.name for p in RED_ORIGINAL.glob("*.jsonl")) if RED_ORIGINAL.is_dir() else [])
def test_every_original_file_loads_without_conversion(name):
    path = RED_ORIGINAL / name
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    examples = read_jsonl(path)
    assert len(examples) == len(raw) > 0
    for row, ex in zip(raw, examples):
        assert ex.answer == int(row["answer"])
        assert ex.question == (row.get("question") or row["expr"]).strip()
        assert ex.label == domain_of(ex.answer)
        if "num_steps" in row:
            assert ex.num_ops == row["num_steps"]
        if "operation" in row:
            assert ex.operation == row["operation"]


def test_the_original_files_are_all_there():
    """Guards the parametrisation above against silently testing nothing."""
    if not RED_ORIGINAL.is_dir():
        pytest.skip(f"{RED_ORIGINAL} is absent (forks may not have it)")
    names = {p.name for p in RED_ORIGINAL.glob("*.jsonl")}
    assert {
        "train_add_2_99.jsonl",
        "train_ops_balanced.jsonl",
        "train_ops_balancedplus.jsonl",
        "train_ops_balancedsub.jsonl",
        "two_step_subtraction_20k.jsonl",
    } <= names


# ---- errors name the file, the line and the field -------------------------------------------------------

GOOD = {"question": "What is 2 plus 3?", "answer": 5}


def test_malformed_json_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", [GOOD, GOOD, '{"question": "x", "answer": ', GOOD])
    message = error_of(path)
    assert f"{path}:3" in message and "malformed JSON" in message


def test_malformed_json_line_number_counts_blank_lines(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", [GOOD, "", "not json"])
    assert f"{path}:3:" in error_of(path)


@pytest.mark.parametrize("answer", [MIN_ANSWER - 1, 0, -7, MAX_ANSWER + 1, 150, "150"])
def test_answer_outside_vocabulary(tmp_path, answer):
    path = write_lines(tmp_path / "oov.jsonl", [GOOD, {"question": "q?", "answer": answer}])
    message = error_of(path)
    assert f"{path}:2" in message and "'answer'" in message and str(int(answer)) in message
    assert f"{MIN_ANSWER}..{MAX_ANSWER}" in message


def test_any_integer_answer_where_the_caller_allows_it(tmp_path):
    """A decomposed step or question may answer -25 or 150: such a record has no range label, and
    it writes and reads back without one; a label that claims a range for it is still refused."""
    rows = [
        {"question": "What is 5 minus 30?", "answer": -25, "operation": "sub"},
        {"question": "What is 120 plus 30?", "answer": "150"},
        GOOD,
    ]
    examples = read_jsonl(write_lines(tmp_path / "any.jsonl", rows), answers=None)
    assert [(ex.answer, ex.label, ex.domain) for ex in examples[:2]] == [(-25, None, None), (150, None, None)]
    assert "label" not in examples[0].to_json() and "domain" not in examples[0].to_json()
    again = write_lines(tmp_path / "again.jsonl", [ex.to_json() for ex in examples])
    assert read_jsonl(again, answers=None) == examples
    assert "outside the answers this run can give -148..200" in error_of_range(
        tmp_path, {"question": "q?", "answer": 201}, (-148, 200)
    )
    bad = write_lines(tmp_path / "claims.jsonl", [{"question": "q?", "answer": -25, "domain": "R1"}])
    with pytest.raises(
        RedkitError, match=r"claims.jsonl:1: field 'domain' = 'R1' does not match answer -25 \(outside 2..100"
    ):
        read_jsonl(bad, answers=None)


def error_of_range(tmp_path: Path, record: dict, answers: tuple[int, int]) -> str:
    with pytest.raises(RedkitError) as err:
        read_jsonl(write_lines(tmp_path / "range.jsonl", [record]), answers=answers)
    return str(err.value)


@pytest.mark.parametrize("answer", [7.5, "seven", None, True, [7]])
def test_answer_not_an_integer(tmp_path, answer):
    path = write_lines(tmp_path / "nan.jsonl", [{"question": "q?", "answer": answer}])
    message = error_of(path)
    assert f"{path}:1" in message and "'answer'" in message and "integer" in message


@pytest.mark.parametrize(
    "field, value", [("domain", "R9"), ("domain", "range_1_20"), ("domain", "big"), ("label", 5), ("label", -1)]
)
def test_unknown_domain(tmp_path, field, value):
    path = write_lines(tmp_path / "dom.jsonl", [GOOD, GOOD, {"question": "q?", "answer": 5, field: value}])
    message = error_of(path)
    assert f"{path}:3" in message and f"'{field}'" in message and "unknown domain" in message


@pytest.mark.parametrize("field, value", [("label", 2), ("domain", "range_41_60"), ("domain", "R3")])
def test_label_that_contradicts_the_answer(tmp_path, field, value):
    path = write_lines(tmp_path / "contra.jsonl", [{"question": "q?", "answer": 5, field: value}])
    message = error_of(path)
    assert f"{path}:1" in message and f"'{field}'" in message and "does not match answer 5" in message


def test_label_and_domain_must_both_agree(tmp_path):
    path = write_lines(tmp_path / "contra.jsonl", [{"question": "q?", "answer": 61, "label": 3, "domain": "R1"}])
    message = error_of(path)
    assert "'domain'" in message and "does not match answer 61" in message


def test_missing_answer(tmp_path):
    path = write_lines(tmp_path / "noans.jsonl", [GOOD, {"question": "What is 2 plus 3?", "result": 5}])
    message = error_of(path)
    assert f"{path}:2" in message and "missing field 'answer'" in message


@pytest.mark.parametrize("record", [{"answer": 5}, {"question": "   ", "answer": 5}, {"question": 12, "answer": 5}])
def test_missing_question(tmp_path, record):
    path = write_lines(tmp_path / "noq.jsonl", [record])
    message = error_of(path)
    assert f"{path}:1" in message and "'question'" in message and "'expr'" in message


@pytest.mark.parametrize("line", ["[1, 2]", '"text"', "42"])
def test_line_that_is_not_an_object(tmp_path, line):
    path = write_lines(tmp_path / "arr.jsonl", [GOOD, line])
    message = error_of(path)
    assert f"{path}:2" in message and "JSON object" in message


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    message = error_of(path)
    assert str(path) in message and "no records" in message


def test_missing_file(tmp_path):
    message = error_of(tmp_path / "nope.jsonl")
    assert str(tmp_path / "nope.jsonl") in message and "no such" in message


def test_a_directory_is_not_a_data_file(tmp_path):
    assert str(tmp_path) in error_of(tmp_path)


def test_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"question": "caf\xe9?", "answer": 5}\n')
    message = error_of(path)
    assert f"{path}:2" in message


@pytest.mark.parametrize("answer", ["--5", "\u00b2"])
def test_odd_digit_strings_are_user_errors(tmp_path, answer):
    path = write_lines(tmp_path / "odd.jsonl", [{"question": "q?", "answer": answer}])
    assert "'answer'" in error_of(path)
