"""Step programs: what the step decomposer writes and the executor runs (docs/guides/design.md, decision 9).

    Step 1: 33 + 23 = x1
    Step 2: x1 - 36 = x2
    Answer: x2

Step k applies one operator (+, - or *) to two operands, each an integer copied from the question
or a variable x1..x(k-1) set by an earlier step, and assigns xk. A program holds structure only,
never a computed value: numbers are computed when it is executed, either exactly (the default)
or by neural operation experts. For the latter, every step is first resolved to concrete operands
and handed to `step_fn(a, op, b)`; `step_question(a, op, b)` phrases it exactly as the operation
experts were trained ("What is 56 minus 36?"). `execute_batch` runs the k-th steps of many
programs together, so a neural executor answers them in one forward pass.

Programs come from a model (the decomposer) and from other people's files, so anything off-format
raises a one-line RedkitError that names the problem; an evaluation counts such a program as wrong.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from redkit.errors import RedkitError
from redkit_experiments.arithmetic.expression import OPERATORS, Expression
from redkit_experiments.arithmetic.phrasing import question
from redkit_experiments.arithmetic.vocabulary import (
    VOCABULARY,  # every step value must lie here unless a caller says otherwise
)

Operand = int | str  # a literal integer, or a variable "x1", "x2", ...
Call = tuple[int, str, int]  # one resolved step: (a, op, b)
StepFn = Callable[[int, str, int], int]
BatchStepFn = Callable[[list[Call]], Sequence[int]]

# ASCII digits only: "x١" must not be the variable x1's twin, and "²" (str.isdigit, yet int() fails)
# must be a symbol the parser names, not a number.
_TOKEN = re.compile(r"\d+|[A-Za-z_]\w*|\S", re.ASCII)  # numbers, words (Step, x1), single symbols
_VARIABLE = re.compile(r"x[1-9]\d*", re.ASCII)


def variable(k: int) -> str:
    return f"x{k}"


@dataclass(frozen=True)
class Step:
    left: Operand
    op: str  # a key of OPERATORS
    right: Operand
    target: str  # the variable this step assigns: x{k} for step k

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right} = {self.target}"

    def resolve(self, values: Sequence[int]) -> Call:
        """(a, op, b) with each variable replaced by its value; values[k - 1] is the value of xk."""
        return _value(self.left, values), self.op, _value(self.right, values)


def _value(operand: Operand, values: Sequence[int]) -> int:
    return operand if isinstance(operand, int) else values[int(operand[1:]) - 1]


@dataclass(frozen=True)
class Program:
    steps: tuple[Step, ...]
    answer_var: str

    def __str__(self) -> str:  # the canonical text (render_program)
        return render_program(self)

    def __post_init__(self):
        _validate(self)  # a Program object is always well-formed, however it was built

    @property
    def num_steps(self) -> int:
        return len(self.steps)


def _validate(program: Program) -> None:
    if not program.steps:
        raise RedkitError("program has no steps")
    defined: list[str] = []
    for k, step in enumerate(program.steps, start=1):
        if step.op not in OPERATORS:
            raise RedkitError(f"step {k}: bad operator {step.op!r} (expected one of {' '.join(OPERATORS)})")
        for operand in (step.left, step.right):
            if isinstance(operand, bool) or not isinstance(operand, (int, str)):
                raise RedkitError(f"step {k}: operand {operand!r} is neither an integer nor a variable")
            if isinstance(operand, int) and operand < 0:
                raise RedkitError(f"step {k}: number {operand} is out of range (operands are integers >= 0)")
            if isinstance(operand, str) and operand not in defined:
                known = ", ".join(defined) or "none yet"
                raise RedkitError(f"step {k}: unknown variable {operand!r} (defined before it: {known})")
        if step.target != variable(k):
            raise RedkitError(
                f"step {k} assigns the wrong variable {step.target!r}: step {k} must assign {variable(k)}"
            )
        defined.append(step.target)
    if program.answer_var not in defined:
        raise RedkitError(f"Answer names unknown variable {program.answer_var!r} (defined: {', '.join(defined)})")


# --- text <-> Program -------------------------------------------------------------------------


def render_program(program: Program) -> str:
    """The canonical text; parse_program(render_program(p)) == p."""
    lines = [f"Step {k}: {step}" for k, step in enumerate(program.steps, start=1)]
    return "\n".join(lines + [f"Answer: {program.answer_var}"])


def parse_program(text: str) -> Program:
    """Text -> Program. Whitespace around tokens and blank lines are tolerated; nothing else is."""
    if not isinstance(text, str) or not text.strip():
        raise RedkitError("empty program: expected 'Step 1: a + b = x1' lines and an 'Answer: x...' line")
    steps: list[Step] = []
    answer = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"program line {line_no}"
        if answer is not None:
            raise RedkitError(f"{where}: trailing garbage after the Answer line: {line.strip()!r}")
        tokens = _TOKEN.findall(line)
        if tokens[:2] == ["Answer", ":"]:
            answer = _answer(tokens[2:], where)
        elif tokens[0] == "Step":
            steps.append(_step(tokens[1:], len(steps) + 1, where))
        else:
            raise RedkitError(f"{where}: expected 'Step {len(steps) + 1}: ...' or 'Answer: x...', got {line.strip()!r}")
    if answer is None:
        raise RedkitError(f"missing Answer line: the program must end with 'Answer: x{len(steps) or 1}'")
    return Program(tuple(steps), answer)


def _step(tokens: list[str], k: int, where: str) -> Step:
    """tokens after 'Step': ['2', ':', 'x1', '-', '36', '=', 'x2']"""
    if len(tokens) < 2 or not _is_number(tokens[0]) or tokens[1] != ":":
        raise RedkitError(f"{where}: expected 'Step {k}:' to start the line")
    if int(tokens[0]) != k:
        problem = "gap" if int(tokens[0]) > k else "out of order"
        raise RedkitError(f"{where}: step numbering {problem}: expected 'Step {k}', got 'Step {tokens[0]}'")
    body = tokens[2:]
    if len(body) < 5:
        raise RedkitError(f"{where}: incomplete step {' '.join(body)!r}: expected 'a + b = x{k}'")
    left, op, right, equals, target = body[:5]  # checked in reading order: the first problem is named
    left = _operand(left, where)
    if op not in OPERATORS:
        raise RedkitError(f"{where}: bad operator {op!r} (expected one of {' '.join(OPERATORS)})")
    right = _operand(right, where)
    if equals != "=":
        raise RedkitError(f"{where}: expected '=' after '{left} {op} {right}', got {equals!r} (one operator per step)")
    if not _VARIABLE.fullmatch(target):
        raise RedkitError(f"{where}: step {k} assigns {target!r}, not a variable: expected x{k}")
    if len(body) > 5:
        raise RedkitError(f"{where}: trailing garbage {' '.join(body[5:])!r} after step {k}")
    return Step(left, op, right, target)


def _is_number(token: str) -> bool:
    return token.isascii() and token.isdigit()


def _operand(token: str, where: str) -> Operand:
    if _is_number(token):
        return int(token)
    if _VARIABLE.fullmatch(token):
        return token
    if token[0].isalpha() or token[0] == "_":
        raise RedkitError(f"{where}: unknown variable {token!r} (variables are x1, x2, ...)")
    raise RedkitError(f"{where}: expected a number or a variable, got {token!r}")


def _answer(tokens: list[str], where: str) -> str:
    if not tokens or not _VARIABLE.fullmatch(tokens[0]):
        got = " ".join(tokens) or "nothing"
        raise RedkitError(f"{where}: the Answer line must name a variable such as x2, got {got!r}")
    if len(tokens) > 1:
        raise RedkitError(f"{where}: trailing garbage {' '.join(tokens[1:])!r} after 'Answer: {tokens[0]}'")
    return tokens[0]


def program_from_expression(expr: Expression) -> Program:
    """The left-associative program of a chain: 12 - 5 + 9 -> x1 = 12 - 5; x2 = x1 + 9; Answer: x2."""
    steps = tuple(
        Step(expr.operands[0] if k == 1 else variable(k - 1), op, x, variable(k))
        for k, (op, x) in enumerate(zip(expr.operators, expr.operands[1:]), start=1)
    )
    return Program(steps, variable(len(steps)))


# --- execution --------------------------------------------------------------------------------


class Execution(NamedTuple):
    answer: int
    values: list[int]  # (num_steps,): values[k - 1] is the value of xk


def exact(a: int, op: str, b: int) -> int:
    """Exact arithmetic: the default step function, and the reference for the neural one."""
    return OPERATORS[op](a, b)


def step_question(a: int, op: str, b: int) -> str:
    """'What is 56 minus 36?': one resolved step as text, phrased as the operation experts' data."""
    return question((a, b), (op,))


def execute(
    program: Program, step_fn: StepFn | None = None, value_range: tuple[int, int] | None = VOCABULARY
) -> Execution:
    """Run one program; `step_fn(a, op, b)` computes each step (exact arithmetic by default).

    With `value_range`, a step value outside it raises RedkitError ("out of range"); pass None
    to compute freely (e.g. Task 2 chains, whose intermediate values may leave 2..100).
    """
    step = step_fn or exact
    return execute_batch([program], lambda calls: [step(*call) for call in calls], value_range)[0]


def execute_batch(
    programs: Sequence[Program], steps_fn: BatchStepFn | None = None, value_range: tuple[int, int] | None = VOCABULARY
) -> list[Execution]:
    """Run many programs in rounds: round k resolves the k-th step of every program that has one
    and passes all of them to `steps_fn` at once (a neural executor's batch); results are in order."""
    steps_fn = steps_fn or (lambda calls: [exact(*call) for call in calls])
    values: list[list[int]] = [[] for _ in programs]
    for k in range(max((p.num_steps for p in programs), default=0)):
        active = [i for i, p in enumerate(programs) if k < p.num_steps]
        calls = [programs[i].steps[k].resolve(values[i]) for i in active]
        results = list(steps_fn(calls))
        if len(results) != len(calls):
            raise ValueError(f"steps_fn returned {len(results)} values for {len(calls)} steps")
        for i, (a, op, b), value in zip(active, calls, results):
            value = int(value)
            if value_range is not None and not value_range[0] <= value <= value_range[1]:
                raise RedkitError(
                    f"step {k + 1}: {a} {op} {b} = {value} is out of range {value_range[0]}..{value_range[1]}"
                )
            values[i].append(value)
    return [Execution(values[i][int(p.answer_var[1:]) - 1], values[i]) for i, p in enumerate(programs)]
