"""Operation-expert data: one operation per question, "What is 56 minus 36?" (DESIGN.md decision 8).

The decomposed executor asks these experts one resolved step at a time, so their data must cover
every step a decomposer program can produce while keeping each value in the vocabulary 2..100:

- add `a + b`: a in 2..98, b in 2..50, sum in 2..100 (a is a literal or any earlier step value);
- sub `a - b`: a in 4..150, b in 2..50, difference in 2..100 (a literal left operand of the
  original authors' data goes up to 150);
- mul `a * b`: a, b in 2..50, product in 2..100 (the plug-in expert of issue 3, item 7). Only
  283 pairs exist, 27 of them in R1, so a structure-disjoint split has few test structures and,
  for some seeds (about 1 in 8), none at all in some range of val or test: use --split random then.

Every range R1..R5 is reachable for all three, so each dataset is exactly balanced over ranges
like every other task, and each record carries its `operation` ("add", "sub", "mul").

Two choices differ from the other chain tasks, both because the executor asks these experts about
any step a program can produce, phrased one way:

- the questions use the one phrasing the executor asks, `programs.step_question` ("What is 56
  minus 36?", the original authors' operation data); held-out phrasings are still written, to
  measure how far a step expert carries to other wordings;
- within a range, pairs are dealt from a shuffled deck rather than drawn independently: every
  valid pair comes up once before any comes up twice. 20k examples then hold each of the ~4,000
  pairs of an operation at least 4 times, and a random split leaves about 0.2^4 = 0.16 % of them
  out of train, where independent draws would leave 4 % (e^-3.3) unseen.
"""

import random

from redkit.data.chains import ChainConfig, ChainTask
from redkit.data.expression import OPERATION_NAMES, Expression
from redkit.data.tasks import TASKS

OPERATIONS = {
    "add": ChainConfig(num_ops=((1, 1.0),), operators=("+",), first_operand=(2, 98), operand=(2, 50)),
    "sub": ChainConfig(num_ops=((1, 1.0),), operators=("-",), first_operand=(4, 150), operand=(2, 50)),
    "mul": ChainConfig(num_ops=((1, 1.0),), operators=("*",), first_operand=(2, 50), operand=(2, 50)),
}


class OperationTask(ChainTask):
    default_n = 20_000  # paper §4.2.6
    train_templates = ("chain",)

    def __init__(self, config: ChainConfig | None = None):
        super().__init__(config)
        self._decks: dict[int, list[Expression]] = {}  # range label -> pairs not dealt yet in this round

    def sample(self, rng: random.Random, label: int) -> Expression:
        deck = self._decks.setdefault(label, [])
        if not deck:
            deck += self.space(1, label).all()
            rng.shuffle(deck)
        return deck.pop()

    def record_fields(self, expression: Expression) -> dict:
        return super().record_fields(expression) | {"operation": OPERATION_NAMES[expression.operators[0]]}


@TASKS.register("op_add")
class OpAdd(OperationTask):
    config = OPERATIONS["add"]


@TASKS.register("op_sub")
class OpSub(OperationTask):
    config = OPERATIONS["sub"]


@TASKS.register("op_mul")
class OpMul(OperationTask):
    config = OPERATIONS["mul"]
