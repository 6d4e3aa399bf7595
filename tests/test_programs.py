"""Step programs: exact round trips, one clear error per kind of malformed program, execution."""

import re
from pathlib import Path

import pytest

from redkit.errors import RedkitError
from redkit_experiments.arithmetic.expression import Expression
from redkit_experiments.arithmetic.programs import (
    Program,
    Step,
    execute,
    execute_batch,
    parse_program,
    program_from_expression,
    render_program,
    step_question,
)
from redkit_experiments.arithmetic.records import read_jsonl

PAPER = "Step 1: 33 + 23 = x1\nStep 2: x1 - 36 = x2\nAnswer: x2"
EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "external" / "red-original"


def test_paper_program_parses_to_its_steps_and_renders_back_exactly():
    program = parse_program(PAPER)
    assert program == Program((Step(33, "+", 23, "x1"), Step("x1", "-", 36, "x2")), "x2")
    assert render_program(program) == PAPER
    assert execute(program) == (20, [56, 20])


@pytest.mark.parametrize(
    "text",
    [
        "Step 1: 7 * 6 = x1\nAnswer: x1",
        "Step 1: 12 - 5 = x1\nStep 2: 40 + 9 = x2\nStep 3: x2 - x1 = x3\nStep 4: x3 + 0 = x4\nAnswer: x4",
        "Step 1: 103 - 42 = x1\nAnswer: x1",  # the original authors' format: left operands above 100
    ],
)
def test_round_trip_is_exact(text):
    assert render_program(parse_program(text)) == text
    program = parse_program(text)
    assert parse_program(render_program(program)) == program


def test_spacing_and_blank_lines_are_tolerated_and_normalised():
    assert render_program(parse_program("  Step 1:33+23=x1\r\n\nStep 2 : x1 -36 =  x2 \nAnswer:x2\n")) == PAPER


def test_program_from_expression_is_the_left_associative_chain():
    program = program_from_expression(Expression((12, 5, 9, 3), ("-", "+", "-")))
    assert render_program(program) == "Step 1: 12 - 5 = x1\nStep 2: x1 + 9 = x2\nStep 3: x2 - 3 = x3\nAnswer: x3"
    assert execute(program).answer == 13


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty program"),
        ("Step 1: 33 + 23 = x1\nStep 2: x3 - 36 = x2\nAnswer: x2", "unknown variable 'x3'"),
        ("Step 1: 33 + y = x1\nAnswer: x1", "unknown variable 'y'"),
        ("Step 1: x1 + 2 = x1\nAnswer: x1", "unknown variable 'x1'"),
        ("Step 1: 33 + 23 = x1\nStep 3: x1 - 36 = x3\nAnswer: x3", "step numbering gap"),
        ("Step 1: 33 + 23 = x1\nStep 1: x1 - 36 = x2\nAnswer: x2", "step numbering out of order"),
        ("Step 1: 33 + 23 = x1\nStep 2: x1 - 36 = x2", "missing Answer line"),
        ("Step 1: 33 / 23 = x1\nAnswer: x1", "bad operator '/'"),
        ("Step 1: 33 plus 23 = x1\nAnswer: x1", "bad operator 'plus'"),
        ("Step 1: 33 + 23 = x2\nAnswer: x2", "wrong variable 'x2'"),
        ("Step 1: 33 + 23 = x1\nStep 2: x1 - 36 = x1\nAnswer: x1", "wrong variable 'x1'"),
        ("Step 1: 33 + 23 = x1\nAnswer: x1\nStep 2: x1 - 36 = x2", "trailing garbage"),
        ("Step 1: 33 + 23 = x1 + 4\nAnswer: x1", "trailing garbage '+ 4'"),
        ("Step 1: 33 + 23 = x1\nAnswer: x1.", "trailing garbage '.'"),
        ("Step 1: 33 + 23 = x1\nAnswer: x2", "unknown variable 'x2'"),
        ("Step 1: 33 + 23 = x1\nAnswer: 56", "must name a variable"),
        ("Answer: x1", "no steps"),
        ("Step 1: 33 + 23\nAnswer: x1", "incomplete step"),
        ("Step 1: 33 + 23 + 4 = x1\nAnswer: x1", "one operator per step"),
        ("Step 1: 33 + 23 = 56\nAnswer: x1", "not a variable"),
        ("Step 1: -3 + 23 = x1\nAnswer: x1", "expected a number or a variable"),
        ("33 plus 23 minus 36", "expected 'Step 1: ...'"),
    ],
)
def test_malformed_program_names_its_problem(text, problem):
    with pytest.raises(RedkitError, match=re.escape(problem)) as err:
        parse_program(text)
    assert "\n" not in str(err.value)  # one line, as the CLI prints it


@pytest.mark.parametrize(
    "text, problem",
    [
        ("Step 1: 33 - 40 = x1\nAnswer: x1", "step 1: 33 - 40 = -7 is out of range 2..100"),
        ("Step 1: 60 + 23 = x1\nStep 2: x1 + 36 = x2\nAnswer: x2", "step 2: 83 \\+ 36 = 119 is out of range"),
    ],
)
def test_step_value_out_of_range(text, problem):
    with pytest.raises(RedkitError, match=problem):
        execute(parse_program(text))
    assert execute(parse_program(text), value_range=None).answer in (-7, 119)  # unchecked: plain arithmetic


def test_negative_literal_in_a_built_program_is_out_of_range():
    with pytest.raises(RedkitError, match="number -3 is out of range"):
        Program((Step(-3, "+", 5, "x1"),), "x1")


def test_step_fn_gets_resolved_operands_and_its_answers_are_substituted():
    asked = []

    def expert(a, op, b):  # stands in for the neural experts: always answers one too many
        asked.append(step_question(a, op, b))
        return a + b + 1 if op == "+" else a - b + 1

    answer, values = execute(parse_program(PAPER), step_fn=expert)
    assert asked == ["What is 33 plus 23?", "What is 57 minus 36?"]  # 57: the expert's own x1
    assert (answer, values) == (22, [57, 22])
    assert step_question(6, "*", 7) == "What is 6 times 7?"


def test_execute_batch_asks_each_round_in_one_call():
    programs = [parse_program(PAPER), parse_program("Step 1: 7 * 6 = x1\nAnswer: x1")]
    rounds = []

    def experts(calls):
        rounds.append(calls)
        return [execute(Program((Step(a, op, b, "x1"),), "x1"), value_range=None).answer for a, op, b in calls]

    assert execute_batch(programs, experts) == [(20, [56, 20]), (42, [42])]
    assert rounds == [[(33, "+", 23), (7, "*", 6)], [(56, "-", 36)]]


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="the original authors' data is not next to this checkout")
def test_original_authors_programs_parse_and_execute_to_their_answers():
    checked = 0
    for path in sorted(EXTERNAL.glob("*.jsonl")):
        for example in read_jsonl(path):
            if example.program:
                assert execute(parse_program(example.program)).answer == example.answer, (path.name, example.id)
                checked += 1
    assert checked > 300  # two_step_subtraction_20k's sample
