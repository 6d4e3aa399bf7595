"""Task 2, operation-expert and decomposer data: distributions, balance, splits, templates, programs."""

import itertools
import json
import random
import re
from collections import Counter
from fractions import Fraction

import pytest

from redkit_experiments.arithmetic.chains import ChainConfig, chain_space
from redkit_experiments.arithmetic.expression import OPERATION_NAMES, Expression
from redkit_experiments.arithmetic.generate import HELDOUT, SPLITS, DataConfig, generate, write_dataset
from redkit_experiments.arithmetic.operations import OPERATIONS, OpAdd, OperationTask
from redkit_experiments.arithmetic.phrasing import HELDOUT_STYLES, STYLES, TRAIN_STYLES
from redkit_experiments.arithmetic.programs import execute, parse_program, program_from_expression, step_question
from redkit_experiments.arithmetic.records import read_jsonl
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.arithmetic.vocabulary import NUM_DOMAINS, RANGES
from redkit_experiments.steps.run import operations_space


@pytest.fixture(scope="module")
def task2():
    return generate(DataConfig(task="task2", n=5000))


@pytest.fixture(scope="module")
def decomposer():
    return generate(DataConfig(task="decomposer", n=2000))


def _all(datasets):
    return [ex for split in SPLITS for ex in datasets[split]]


def _skeleton(text: str) -> str:
    return re.sub(r"\d+", "{n}", text)


def _expression(structure: str) -> Expression:
    tokens = re.findall(r"^-?\d+|\d+|[-+*]", structure)  # a first operand may be negative: "-38-43"
    return Expression(tuple(map(int, tokens[::2])), tuple(tokens[1::2]))


def test_paper_phrasings_are_training_styles():
    texts = {STYLES[name]((12, 5, 9), ("-", "+")) for name in TRAIN_STYLES}
    assert {
        "What is 12 minus 5 plus 9?",
        "Compute 12 minus 5, then add 9.",
        "If you subtract 5 from 12 and add 9, what do you get?",
    } <= texts


def test_heldout_styles_never_phrase_a_chain_like_a_training_style():
    for num_ops in (1, 2, 3, 4):
        for operators in itertools.product("+-*", repeat=num_ops):
            operands = tuple(range(11, 12 + num_ops))
            train = {_skeleton(STYLES[name](operands, operators)) for name in TRAIN_STYLES}
            heldout = {_skeleton(STYLES[name](operands, operators)) for name in HELDOUT_STYLES}
            assert len(train) == len(TRAIN_STYLES) and len(heldout) == len(HELDOUT_STYLES)
            assert not train & heldout


def test_task2_operand_counts_follow_50_30_20(task2):
    counts = Counter(ex.num_ops + 1 for ex in _all(task2))
    total = sum(counts.values())
    for operands, share in {2: 0.5, 3: 0.3, 4: 0.2}.items():
        assert abs(counts[operands] / total - share) < 0.03, counts


def test_task2_records_are_valid_chains_whose_programs_give_the_answer(task2):
    for ex in _all(task2) + task2[HELDOUT]:
        expr = _expression(ex.structure)
        assert all(2 <= x <= 50 for x in expr.operands) and set(expr.operators) <= {"+", "-"}
        assert expr.value == ex.answer and RANGES[ex.label][0] <= ex.answer <= RANGES[ex.label][1]
        # Task 2 constrains only the final value: intermediates may leave 2..100, so execute unchecked
        assert execute(parse_program(ex.program), value_range=None).answer == ex.answer


@pytest.mark.parametrize("name", ["task2", "decomposer"])
def test_every_split_is_balanced_over_ranges(name, task2, decomposer):
    datasets = {"task2": task2, "decomposer": decomposer}[name]
    for split, examples in datasets.items():
        counts = Counter(ex.label for ex in examples)
        assert len(counts) == NUM_DOMAINS and max(counts.values()) - min(counts.values()) <= 1, (split, counts)


@pytest.mark.parametrize("name", ["task2", "decomposer"])
def test_structure_split_is_disjoint_and_heldout_templates_are_unseen(name, task2, decomposer):
    datasets = {"task2": task2, "decomposer": decomposer}[name]
    structures = {split: {ex.structure for ex in datasets[split]} for split in SPLITS}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not structures[a] & structures[b], (a, b)
    train_phrasings = {_skeleton(ex.question) for ex in datasets["train"]}
    assert not train_phrasings & {_skeleton(ex.question) for ex in datasets[HELDOUT]}
    assert sorted(ex.structure for ex in datasets[HELDOUT]) == sorted(ex.structure for ex in datasets["test"])
    assert {ex.template.split("/")[0] for ex in datasets[HELDOUT]} == {"heldout"}


def _steps(program) -> list[tuple[int, str, int, int]]:
    """Every step of an exactly executed program as (a, op, b, value)."""
    _, values = execute(program, value_range=None)
    return [(*step.resolve(values), value) for step, value in zip(program.steps, values)]


def _in_operation_space(a: int, op: str, b: int, value: int) -> bool:
    """Whether an operation expert's data holds this step (what the executor may ask it)."""
    task = TASKS[f"op_{OPERATION_NAMES[op]}"]
    return (
        task.config.first_operand[0] <= a <= task.config.first_operand[1]
        and task.config.operand[0] <= b <= task.config.operand[1]
        and task.value_range()[0] <= value <= task.value_range()[1]
    )


def test_decomposer_programs_end_in_vocabulary_with_every_step_in_the_experts_data(decomposer):
    counts = Counter(ex.num_ops for ex in _all(decomposer))
    for steps, share in {2: 0.2, 3: 0.4, 4: 0.4}.items():
        assert abs(counts[steps] / len(_all(decomposer)) - share) < 0.04, counts
    leave = 0
    for ex in _all(decomposer) + decomposer[HELDOUT]:
        program = parse_program(ex.program)
        steps = _steps(program)
        assert steps[-1][3] == ex.answer and 2 <= ex.answer <= 100 and program.num_steps == ex.num_ops
        assert all(2 <= x <= 50 for x in _expression(ex.structure).operands)
        assert all(_in_operation_space(*step) for step in steps), steps
        leave += any(not 2 <= value <= 100 for *_, value in steps)
    assert leave > 0.05 * len(
        decomposer["train"]
    )  # intermediates leave 2..100, as in Task 2 (docs/guides/design.md, decision 7)


def test_every_step_of_every_task2_chain_is_in_the_operation_experts_data(task2):
    """Task 2's own data, and the extremes of any chain of up to three operations on 2..50 (-148, 200)."""
    for ex in _all(task2):
        assert all(_in_operation_space(*step) for step in _steps(parse_program(ex.program)))
    for ops in itertools.product("+-", repeat=3):
        for operands in ((2, 50, 50, 50), (50, 50, 50, 50), (2, 2, 50, 50), (50, 2, 2, 2)):
            expr = Expression(operands, ops)
            assert all(_in_operation_space(*step) for step in _steps(program_from_expression(expr))), expr.key
    assert operations_space(("add", "sub")).value_range == (2 - 3 * 50, 50 + 3 * 50)


def test_decomposer_writes_the_papers_fields_and_reads_back(tmp_path, decomposer):
    config = DataConfig(task="decomposer", n=2000)
    write_dataset(tmp_path, decomposer, config)
    row = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[0])
    assert list(row)[:7] == ["id", "expr", "answer", "label", "domain", "num_steps", "program"]
    assert read_jsonl(tmp_path / "train.jsonl") == decomposer["train"]


def test_decomposer_times_puts_times_only_where_precedence_cannot_matter():
    examples = _all(generate(DataConfig(task="decomposer_times", n=1000)))
    with_times = [ex for ex in examples if "*" in ex.structure]
    assert with_times
    for ex in with_times:
        assert re.fullmatch(r"\d+(\*\d+)+([-+]\d+)*", ex.structure), ex.structure  # no * after + or -
        assert execute(parse_program(ex.program)).answer == ex.answer


@pytest.mark.parametrize(
    "op, operation, left, right, answers",
    [
        ("+", "add", (-98, 150), (2, 50), (-96, 200)),
        ("-", "sub", (-98, 150), (2, 50), (-148, 148)),
        ("*", "mul", (2, 50), (2, 50), (2, 100)),
    ],
)
def test_operation_data(op, operation, left, right, answers):
    datasets = generate(DataConfig(task=f"op_{operation}", n=1000))
    for ex in _all(datasets) + datasets[HELDOUT]:
        (a, b), (got_op,) = (expr := _expression(ex.structure)).operands, expr.operators
        assert got_op == op and ex.operation == operation and ex.answer == expr.value and not ex.program
        assert left[0] <= a <= left[1] and right[0] <= b <= right[1] and answers[0] <= ex.answer <= answers[1]
        assert ex.label == (
            RANGES.index(next(r for r in RANGES if r[0] <= ex.answer <= r[1])) if 2 <= ex.answer <= 100 else None
        )
        if ex.template.startswith("train/"):  # one phrasing: exactly what the executor asks per step
            assert ex.question == step_question(a, op, b)
    assert TASKS[f"op_{operation}"].value_range() == answers
    if operation == "mul":  # the plug-in's data stays balanced over the answer ranges
        assert set(Counter(ex.label for ex in datasets["train"]).values()) == {160}


def test_negative_steps_are_phrased_as_the_executor_asks_them():
    assert step_question(-25, "+", 40) == "What is -25 plus 40?"
    datasets = generate(DataConfig(task="op_sub", n=1000))
    assert any(ex.question.startswith("What is -") and ex.answer < -50 for ex in datasets["train"])
    assert any(ex.answer > 100 for ex in generate(DataConfig(task="op_add", n=1000))["train"])


@pytest.mark.slow
def test_operation_data_deals_every_pair_before_repeating_one():
    """A random split of the default 50k additions leaves (almost) no valid pair out of train: the
    executor may ask any of the 12,201."""
    datasets = generate(DataConfig(task="op_add", n=OperationTask.default_n, split="random"))
    valid = {e.key for e in chain_space(OPERATIONS["add"], 1, OpAdd.bands[0]).all()}
    assert len(valid) == 12_201
    counts = Counter(ex.structure for ex in _all(datasets))
    assert set(counts) == valid and set(counts.values()) == {4, 5}  # dealt evenly: 50,000 = 4 x 12,201 + 1,196
    seen = {ex.structure for ex in datasets["train"]}
    unseen = sum(ex.structure not in seen for ex in datasets["test"])
    assert unseen < 0.005 * len(datasets["test"])


def test_chain_space_counts_and_draws_exactly_the_valid_chains():
    config = ChainConfig(
        num_ops=((2, 1.0),), operators=("+", "-", "*"), first_operand=(2, 6), operand=(2, 4), intermediate=(2, 20)
    )
    valid = set()  # by brute force: every * comes first or after another *, every value in 2..20
    for a in range(2, 7):
        for o1, b, o2, c in itertools.product("+-*", range(2, 5), "+-*", range(2, 5)):
            x1 = Expression((a, b), (o1,)).value
            expr = Expression((a, b, c), (o1, o2))
            if 2 <= x1 <= 20 and 2 <= expr.value <= 20 and not (o2 == "*" and o1 != "*"):
                valid.add(expr)
    space = chain_space(config, 2, (2, 20))
    assert sum(space.ways[0].values()) == len(valid)
    assert sorted(space.all(), key=lambda e: e.key) == sorted(valid, key=lambda e: e.key)  # each exactly once
    rng = random.Random(0)
    assert {space.sample(rng) for _ in range(30 * len(valid))} == valid
    assert {_probability(space, expr) for expr in valid} == {Fraction(1, len(valid))}  # exactly uniform


def _probability(space, expr: Expression) -> Fraction:
    """The exact probability that space.sample draws `expr`: the product of its picks' weights."""
    p, state = Fraction(1), None
    for i, x in enumerate(expr.operands):
        moves, cumulative = space._table(i - 1, state)
        j = next(j for j, (op, y, _) in enumerate(moves) if y == x and (i == 0 or op == expr.operators[i - 1]))
        p *= Fraction(cumulative[j] - (cumulative[j - 1] if j else 0), cumulative[-1])
        state = moves[j][2]
    return p


def test_generation_is_deterministic_in_the_seed():
    first, again = (generate(DataConfig(task="task2", n=300, seed=3)) for _ in range(2))
    assert first == again
    assert first != generate(DataConfig(task="task2", n=300, seed=4))
