"""`redkit predict` as people use it: many texts from arguments, a file or stdin, a table or JSON lines."""

import io
import json

from conftest import run_cli

from redkit_experiments.arithmetic.vocabulary import SHORT_NAMES

TEXTS = ["What is 12 plus 27?", "What is 40 minus 3?", "If you add 5 to 12, what do you get?"]


def test_many_texts_from_arguments_a_file_or_stdin_give_the_same_table(tiny_run, tmp_path, capsys, monkeypatch):
    code, from_args, err = run_cli(["predict", "--run", tiny_run, *TEXTS], capsys)
    assert code == 0, err
    lines = from_args.splitlines()
    assert (
        len(lines) == 2 + len(TEXTS) and [line.startswith(text) for line, text in zip(lines[2:], TEXTS)] == [True] * 3
    )
    listing = tmp_path / "texts.txt"
    listing.write_text("\n".join([TEXTS[0], "", *TEXTS[1:]]) + "\n", encoding="utf-8")  # a blank line is skipped
    assert run_cli(["predict", "--run", tiny_run, "--file", listing], capsys)[1] == from_args
    monkeypatch.setattr("sys.stdin", io.StringIO(listing.read_text(encoding="utf-8")))
    assert run_cli(["predict", "--run", tiny_run], capsys)[1] == from_args


def test_json_lines_agree_with_the_table(tiny_run, capsys):
    code, table, _ = run_cli(["predict", "--run", tiny_run, *TEXTS], capsys)
    code, out, err = run_cli(["predict", "--run", tiny_run, *TEXTS, "--json"], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == TEXTS
    for record, row in zip(records, table.splitlines()[2:]):
        assert list(record["weights"]) == list(SHORT_NAMES) and abs(sum(record["weights"].values()) - 1) < 1e-5
        answer, range_, p = row.removeprefix(record["text"]).split()[:3]
        assert (record["label"], record["range"], f"{record['probability']:.3f}") == (int(answer), range_, p)


def test_no_text_or_two_sources_is_one_line_before_any_work(tiny_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n\n"))
    code, out, err = run_cli(["predict", "--run", tiny_run], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "no text to answer" in err
    code, _, err = run_cli(["predict", "--run", tiny_run, "a", "--file", tmp_path / "x.txt"], capsys)
    assert code == 2 and "not both" in err
    code, _, err = run_cli(["predict", "--run", tiny_run, "--file", tmp_path / "missing.txt"], capsys)
    assert code == 2 and "missing.txt" in err and err.count("\n") == 1
