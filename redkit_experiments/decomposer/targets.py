"""The decomposer's targets. For every number of the text, in text order: its position in the executed chain
(its *slot*: 0 and 1 are step 1's operands, k is step k's right operand) and the operator that applies it. A
phrasing may say the numbers in another order than they are executed ("If you subtract 5 from 12 ..." says 5
first), so the slots come from the phrasing itself: the question is recognised as a known style of phrasing.py
and re-rendered with distinct marker numbers, which tells where each operand went. Texts of an unknown phrasing
(other people's files) fall back to matching values, ties broken by the fewest inversions of text order.
"""

from collections.abc import Sequence

import torch

from redkit.errors import RedkitError
from redkit_experiments.arithmetic import phrasing
from redkit_experiments.arithmetic.programs import Program, parse_program, render_program
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.decomposer.model import extract_numbers


def chain_of(program: Program) -> tuple[list[int], list[str]]:
    """A left-associative chain program -> (operands in execution order, operators)."""
    first = program.steps[0]
    if (
        not (isinstance(first.left, int) and isinstance(first.right, int))
        or any(
            step.left != f"x{k}" or not isinstance(step.right, int) for k, step in enumerate(program.steps[1:], start=1)
        )
        or program.answer_var != f"x{program.num_steps}"
    ):
        raise RedkitError(f"not a left-associative chain program: {render_program(program)!r}")
    return [first.left] + [step.right for step in program.steps], [step.op for step in program.steps]


def alignment(question: str, program: str | Program, operators: Sequence[str]) -> list[tuple[int, int]]:
    """For each number of the question, in text order: (slot, operator index), operator -100 for slot 0."""
    program = parse_program(program) if isinstance(program, str) else program
    operands, ops = chain_of(program)
    if unknown := set(ops) - set(operators):
        raise RedkitError(
            f"program uses operators {sorted(unknown)} that the decomposer does not predict "
            f"({' '.join(operators)}): {question!r}"
        )
    values = extract_numbers(question)
    if sorted(values) != sorted(operands):
        raise RedkitError(f"the numbers of {question!r} ({values}) are not the program's operands ({operands})")
    slots = _slots_from_style(question, operands, ops) or _slots_by_value(values, operands)
    return [(k, operators.index(ops[k - 1]) if k else -100) for k in slots]


def _slots_from_style(question: str, operands: list[int], ops: list[str]) -> list[int] | None:
    for style in phrasing.STYLES.values():
        if style(operands, ops) == question:
            markers = [10_000 + k for k in range(len(operands))]
            return [value - 10_000 for value in extract_numbers(style(markers, ops))]
    return None


def _slots_by_value(values: list[int], operands: list[int]) -> list[int]:
    """The value-consistent assignment closest to text order (fewest inversions)."""
    slots: list[int] = []
    taken: set[int] = set()
    for value in values:  # equal values take their slots in increasing order: no inversion among them
        k = next(k for k, x in enumerate(operands) if x == value and k not in taken)
        taken.add(k)
        slots.append(k)
    return slots


def target_tensors(examples: Sequence[Example], operators: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, M) slots and operator indices, -100 where a text has fewer numbers."""
    aligned = [alignment(ex.question, ex.program, operators) for ex in examples]
    M = max(len(a) for a in aligned)
    slots = torch.full((len(aligned), M), -100, dtype=torch.long)
    ops = torch.full((len(aligned), M), -100, dtype=torch.long)
    for i, a in enumerate(aligned):
        slots[i, : len(a)] = torch.tensor([s for s, _ in a])
        ops[i, : len(a)] = torch.tensor([o for _, o in a])
    return slots, ops
