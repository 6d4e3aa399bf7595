"""Task 1: single-step addition, "What is 12 plus 27?" (paper §4.1, §4.2.2).

Operands 2..50; the answer a + b is in 4..100. Every sum range R1..R5 gets exactly the same
number of examples, so a pair is drawn uniformly among the pairs whose sum lies in the range
asked for. Training templates and held-out templates are disjoint sets of phrasings.
"""

import random

from redkit_experiments.arithmetic.expression import Expression
from redkit_experiments.arithmetic.tasks import TASKS, TextTask
from redkit_experiments.arithmetic.vocabulary import RANGES

OPERAND_MIN, OPERAND_MAX = 2, 50

TRAIN_TEMPLATES = (
    "What is {a} plus {b}?",
    "How much is {a} plus {b}?",
    "What is the sum of {a} and {b}?",
    "Add {a} and {b}.",
    "Calculate {a} + {b}.",
    "{a} plus {b} equals what?",
    "If you add {b} to {a}, what do you get?",
    "Compute the total of {a} and {b}.",
)
HELDOUT_TEMPLATES = (
    "What do you get when you add {a} and {b}?",
    "Tell me {a} plus {b}.",
    "Find the sum: {a} + {b}.",
    "Increase {a} by {b}. What is the result?",
)


def _pairs_by_range() -> list[list[tuple[int, int]]]:
    """All ordered operand pairs, grouped by the range label of their sum."""
    groups: list[list[tuple[int, int]]] = [[] for _ in RANGES]
    for a in range(OPERAND_MIN, OPERAND_MAX + 1):
        for b in range(OPERAND_MIN, OPERAND_MAX + 1):
            for label, (lo, hi) in enumerate(RANGES):
                if lo <= a + b <= hi:
                    groups[label].append((a, b))
    return groups


@TASKS.register("task1")
class Task1(TextTask):
    train_templates = TRAIN_TEMPLATES
    heldout_templates = HELDOUT_TEMPLATES

    def __init__(self):
        self.pairs = _pairs_by_range()

    def structures(self, label: int) -> list[Expression]:
        return [Expression((a, b), ("+",)) for a, b in self.pairs[label]]

    def sample(self, rng: random.Random, label: int) -> Expression:
        a, b = rng.choice(self.pairs[label])
        return Expression((a, b), ("+",))

    def render(self, expression: Expression, template: str) -> str:
        a, b = expression.operands
        return template.format(a=a, b=b)
