"""Property-based tests: whatever bytes, text or argv a user hands redkit, the readers and the CLI
either accept it or refuse it with a RedkitError (one line, exit code 2), never another exception.

Settings are modest (a couple of hundred examples each, no deadline) so the file runs in well under
a minute; scripts/fuzz_cli.py drives ten thousand inputs through the whole CLI instead. The
regressions at the end are inputs these properties (or the script) found, kept as plain tests.
"""

import json

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redkit.errors import RedkitError

FUZZ = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# JSON-like values, nested a little, with the awkward scalars: huge and non-finite numbers, unicode.
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**30)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(["12", " 7 ", "R3", "range_2_20", "²", "٣", "1e400", "-0", ""])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["question", "expr", "answer", "label", "domain", "num_ops", "num_steps", "id", "program", "operation"]
)
RECORDS = st.dictionaries(FIELDS, JSON_VALUES, max_size=7) | JSON_VALUES


def _is_one_line(err: RedkitError) -> bool:
    return len(str(err).splitlines()) == 1


@pytest.mark.slow
@FUZZ
@given(st.lists(st.binary(max_size=60) | RECORDS.map(lambda r: json.dumps(r).encode()), min_size=0, max_size=6))
def test_the_jsonl_reader_reads_or_refuses_any_bytes(tmp_path, lines):
    from redkit_experiments.arithmetic.records import read_jsonl

    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines))
    for answers in ((2, 100), None):
        try:
            examples = read_jsonl(path, answers=answers)
        except RedkitError as err:
            assert _is_one_line(err) and str(path) in str(err)
        else:
            assert examples and all(isinstance(ex.answer, int) and ex.question for ex in examples)


@pytest.mark.slow
@FUZZ
@given(RECORDS)
def test_parse_record_takes_or_names_any_decoded_value(record):
    from redkit_experiments.arithmetic.records import parse_record

    try:
        example = parse_record(record, "f.jsonl:1", default_id=0)
    except RedkitError as err:
        assert _is_one_line(err) and str(err).startswith("f.jsonl:1: ")
    else:
        assert 2 <= example.answer <= 100


# Programs: well-formed pieces recombined (so that deep cases are reached) and raw text.
PROGRAM_TOKENS = st.sampled_from(
    [
        "Step",
        "1",
        "2",
        "3",
        ":",
        "x1",
        "x2",
        "x3",
        "+",
        "-",
        "*",
        "=",
        "Answer",
        "\n",
        " ",
        "²",
        "٣",
        "x0",
        "12",
        "007",
        "y",
        "==",
        "\t",
        "Step 1:",
    ]
)
PROGRAM_TEXTS = st.lists(PROGRAM_TOKENS, max_size=30).map(" ".join) | st.text(max_size=80)


@FUZZ
@given(PROGRAM_TEXTS)
def test_the_program_parser_parses_or_names_any_text(text):
    from redkit_experiments.arithmetic.programs import parse_program, render_program

    try:
        program = parse_program(text)
    except RedkitError as err:
        assert _is_one_line(err)
    else:
        assert parse_program(render_program(program)) == program


@FUZZ
@given(JSON_VALUES.map(lambda v: json.dumps(v)) | st.text(max_size=80) | st.binary(max_size=60))
def test_the_bundle_manifest_reader_reads_or_names_any_file(tmp_path, content):
    from redkit.bundle.manifest import MANIFEST, read_manifest

    (tmp_path / MANIFEST).write_bytes(content if isinstance(content, bytes) else content.encode())
    try:
        manifest = read_manifest(tmp_path)
    except RedkitError as err:
        assert _is_one_line(err)
    else:
        assert isinstance(manifest["files"], dict)


@pytest.mark.slow
@FUZZ
@given(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4), st.integers(-3, 5))
def test_the_bundle_manifest_reader_checks_its_fields(tmp_path, files, fmt):
    from redkit.bundle.manifest import MANIFEST, verify_bundle

    (tmp_path / MANIFEST).write_text(json.dumps({"format": fmt, "files": files}))
    try:
        verify_bundle(tmp_path)
    except RedkitError as err:
        assert _is_one_line(err)


# argv: the real commands and flags, shuffled with junk, so that parsing gets past the first word.
ARGV_WORDS = st.sampled_from(
    [
        "eval",
        "predict",
        "export",
        "train",
        "data",
        "reproduce",
        "study",
        "analyze",
        "report",
        "add-expert",
        "--run",
        "--data",
        "--out",
        "--composition",
        "--heads",
        "--help",
        "-h",
        "red",
        "moe",
        "task1",
        "noise",
        "routing",
        "router",
        "--n",
        "-1",
        "0",
        "x",
        "",
        "--",
        "\x00",
        "/nonexistent",
        "--seed",
        "1e9",
        "ünïcödé",
    ]
)


@pytest.mark.slow
@FUZZ
@given(st.lists(ARGV_WORDS | st.text(max_size=10), max_size=6))
def test_the_cli_exits_0_or_2_on_any_argv(capsys, argv):
    if any("\x00" in a for a in argv):  # a NUL cannot reach a real process's argv; os calls reject it
        argv = [a.replace("\x00", "") for a in argv]
    if (
        "reproduce" in argv
        or "add-expert" in argv
        or "train" in argv
        or "data" in argv
        or "study" in argv
        or "analyze" in argv
    ):
        if not {"--help", "-h"} & set(argv) and "/nonexistent" not in argv:
            argv = ["--version-that-does-not-exist"]  # these would start real work in the test's directory
    code, out, err = run_cli(argv, capsys)
    assert code in (0, 2), (argv, err)
    if code == 2 and not err.startswith("usage:"):
        assert len(err.strip().splitlines()) == 1, (argv, err)


# ---- regressions: inputs the fuzzers found ------------------------------------------------------


@pytest.mark.parametrize("value", ["²", "¹²", "٣"])
def test_a_unicode_digit_domain_is_named_not_a_crash(value):
    from redkit_experiments.arithmetic.records import parse_record

    try:
        parse_record({"question": "q", "answer": 5, "label": value}, "f:1", 0)
    except RedkitError as err:
        assert "label" in str(err)


@pytest.mark.parametrize(
    "text", ["Step ²: 1 + 2 = x1\nAnswer: x1", "Step 1: ² + 2 = x1\nAnswer: x1", "\u00a0\nAnswer: x1"]
)
def test_the_program_parser_names_unicode_digits_and_blank_symbols(text):
    from redkit_experiments.arithmetic.programs import parse_program

    with pytest.raises(RedkitError):
        parse_program(text)


def test_a_huge_or_deeply_nested_record_is_one_line(tmp_path):
    from redkit_experiments.arithmetic.records import read_jsonl

    for line in (
        '{"question": "q", "answer": "' + "9" * 5000 + '"}',
        "[" * 100_000 + "]" * 100_000,
        '{"question": "q", "answer": 5, "label": ' + "[" * 5000 + "]" * 5000 + "}",
    ):
        (tmp_path / "f.jsonl").write_text(line + "\n")
        with pytest.raises(RedkitError) as caught:
            read_jsonl(tmp_path / "f.jsonl")
        assert _is_one_line(caught.value) and len(str(caught.value)) < 500


YAML_KEYS = st.sampled_from(
    ["run", "data", "composition", "heads", "out", "config", "seed", "n", "run_", "--run", "", "ünï"]
)
YAML_TEXTS = (
    st.dictionaries(YAML_KEYS, JSON_VALUES, max_size=4).map(lambda d: json.dumps(d))  # JSON is YAML
    | st.lists(
        st.sampled_from(
            [
                "run: x",
                "composition: [red, moe]",
                "heads: yes",
                "heads: 3",
                "- a",
                "&a [*a]",
                "data: !!python/object:os.system x",
                "{",
                "seed: 1e999",
                "n: 0x10",
                "\t",
                ": :",
                "composition:",
                "  - red",
                "out: ~",
                "? [a]\n: b",
                "%YAML 9.9",
                "---",
                "...",
            ]
        ),
        max_size=5,
    ).map("\n".join)
    | st.text(max_size=60)
)


@pytest.mark.slow
@FUZZ
@given(YAML_TEXTS | st.binary(max_size=40))
def test_the_yaml_config_loader_applies_or_names_any_file(tmp_path, content):
    """`--config FILE` for eval and export: any file is applied as defaults or refused in one line."""
    import argparse

    from redkit.cli.evaluate import _options as eval_options
    from redkit.cli.export import _options as export_options
    from redkit.cli.options import apply_config

    path = tmp_path / "config.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    for options in (eval_options, export_options):
        parser = argparse.ArgumentParser()
        options(parser)
        try:
            apply_config(parser, ["--config", str(path)])
        except RedkitError as err:
            assert _is_one_line(err) and str(path) in str(err)


# ---- a fit run's readers: JSONL and CSV of labelled text with domains ---------------------------

FIT_FIELDS = st.sampled_from(["text", "label", "domain", "topic", "id"])
FIT_RECORDS = (
    st.dictionaries(FIT_FIELDS, JSON_VALUES | st.text(alphabet="0123456789", min_size=4000, max_size=5000), max_size=4)
    | JSON_VALUES
)
CSV_CELLS = st.text(max_size=12) | st.sampled_from(["1", "01", " 7 ", "\x00", '"', "a,b", "\r\n", "9" * 5000])


def _read_or_refuse(path) -> None:
    """A fit run's training file: records with text, label and domain, or one RedkitError line."""
    from redkit.fitting.records import Fields, LabelReader, read_records

    try:
        records = read_records(path, Fields(), LabelReader())
    except RedkitError as err:
        assert _is_one_line(err)
    else:
        assert records and all(r.question.strip() and r.answer and r.domain for r in records)


@pytest.mark.slow
@FUZZ
@given(st.lists(st.binary(max_size=60) | FIT_RECORDS.map(lambda r: json.dumps(r).encode()), max_size=6))
def test_the_fit_jsonl_reader_reads_or_refuses_any_bytes(tmp_path, lines):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\n".join(lines))
    _read_or_refuse(path)


@FUZZ
@given(st.lists(st.lists(CSV_CELLS, min_size=1, max_size=4), max_size=5), st.booleans())
def test_the_fit_csv_reader_reads_or_refuses_any_table(tmp_path, rows, header):
    import csv

    path = tmp_path / "train.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if header:
            writer.writerow(["text", "label", "domain"])
        writer.writerows(rows)
    _read_or_refuse(path)


@pytest.mark.parametrize("name", ["\r", "a\nb", "\x00"])
def test_a_manifest_file_name_with_control_characters_is_one_line(tmp_path, name):
    """Found by the manifest property in CI: a listed name "\r" made a two-line error."""
    from redkit.bundle.manifest import MANIFEST, verify_bundle

    (tmp_path / MANIFEST).write_text(json.dumps({"format": 1, "files": {name: {"size": 0, "sha256": ""}}}))
    with pytest.raises(RedkitError, match="not a printable file name") as err:
        verify_bundle(tmp_path)
    assert _is_one_line(err.value)


@pytest.mark.slow
def test_the_fuzz_script_patches_a_backbone_that_exists_and_every_family_makes_an_input():
    """scripts/fuzz_cli.py is run by hand, so nothing else notices when a refactor moves what it patches (it read
    redkit.run.Backbone for months after runs became a package): its harness is set up and every data family's
    generator run once, in a process of its own (the script sets environment variables as it is imported)."""
    import subprocess
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parent.parent / "scripts"
    probe = (
        "import random, sys; sys.path.insert(0, sys.argv[1]); import fuzz_cli, redkit.run.text as text; "
        "fuzz_cli.warm_backbones(); assert text.Backbone.__name__ == 'backbone', text.Backbone; "
        "made = {name: make(random.Random(0)) for name, make in fuzz_cli.DATA_FAMILIES.items()}; "
        "assert all(isinstance(b, bytes) for b in made.values()); print(sorted(made))"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(scripts)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'wrong_types'" in done.stdout and "'deep_nesting'" in done.stdout
