"""Operation-expert data: one operation per question, "What is 56 minus 36?" (docs/guides/design.md, decision 8).

The decomposed executor asks these experts one resolved step at a time, so their data must cover
every step a chain can produce. A Task 2 chain has operands 2..50 and up to three operations
evaluated left to right; a step's left operand is a literal or the value of the steps before it,
so after k operations a value lies in 2 - 50k .. 50 + 50k:

- add and sub `a op b`: a in -98..150 (any value of up to two earlier operations), b in 2..50,
  so add answers -96..200 and sub answers -148..148: together every value -148..200 that a
  chain of up to three operations reaches at any step, including chains whose intermediate
  values leave 2..100 ("5 minus 30 plus 40": -25 + 40 = 15). Every step of the step decomposer's
  data (four operations, final answer in 2..100) lies inside this space too;
- mul `a * b`: a, b in 2..50, product in 2..100 (the plug-in expert of `redkit add-expert`). Only
  283 pairs exist, 27 of them in R1, so a structure-disjoint split has few test structures and,
  for some seeds (about 1 in 8), none at all in some range of val or test: use --split random then.

An expert's answer classes are the values its operation can produce (`value_range`), not the
Task 1 vocabulary; a steps run's LabelSpace is the union over its operations. Negative numbers
are written as the executor asks them: "What is -25 plus 40?". Each record carries its
`operation` ("add", "sub", "mul"); its range label exists only when the answer lies in 2..100.

Two choices differ from the other chain tasks, both because the executor asks these experts about
any step a program can produce, phrased one way:

- the questions use the one phrasing the executor asks, `programs.step_question` ("What is 56
  minus 36?", the original authors' operation data); held-out phrasings are still written, to
  measure how far a step expert carries to other wordings;
- pairs are dealt from a shuffled deck rather than drawn independently: every valid pair comes
  up once before any comes up twice. add and sub have 12,201 pairs each, so 50k examples hold
  every pair 4 times (some 5), and a random split leaves a test pair unseen in training with
  probability about 0.2^4 = 0.16 %, where independent draws would leave 2 % (e^-3.9) unseen.
"""

import random

from redkit_experiments.arithmetic.chains import ChainConfig, ChainTask, Range
from redkit_experiments.arithmetic.expression import OPERATION_NAMES, Expression
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.arithmetic.vocabulary import RANGES

LEFT_OPERAND = (2 - 2 * 50, 50 + 2 * 50)  # (-98, 150): a literal 2..50 or the value of up to two earlier operations
OPERATIONS = {
    "add": ChainConfig(num_ops=((1, 1.0),), operators=("+",), first_operand=LEFT_OPERAND, operand=(2, 50)),
    "sub": ChainConfig(num_ops=((1, 1.0),), operators=("-",), first_operand=LEFT_OPERAND, operand=(2, 50)),
    "mul": ChainConfig(num_ops=((1, 1.0),), operators=("*",), first_operand=(2, 50), operand=(2, 50)),
}


class OperationTask(ChainTask):
    default_n = 50_000  # 4 copies of each of add's and sub's 12,201 pairs (the paper's 20k covered 2..100 only)
    train_templates = ("chain",)

    def __init__(self, config: ChainConfig | None = None):
        super().__init__(config)
        self._decks: dict[int, list[Expression]] = {}  # band -> pairs not dealt yet in this round

    @classmethod
    def value_range(cls) -> Range:
        """(lowest, highest) answer of this operation: its expert's classes."""
        return min(low for low, _ in cls.bands), max(high for _, high in cls.bands)

    def sample(self, rng: random.Random, band: int) -> Expression:
        deck = self._decks.setdefault(band, [])
        if not deck:
            deck += self.space(1, band).all()
            rng.shuffle(deck)
        return deck.pop()

    def record_fields(self, expression: Expression) -> dict:
        """The operation, and no program: a one-step program says nothing the question does not, and
        programs hold literals >= 0 only (a decomposer copies them from text), where a step's left
        operand here may be negative."""
        return {"operation": OPERATION_NAMES[expression.operators[0]]}


# One band each for add and sub (all of its answers): the deck deals every pair equally often. mul
# keeps the five answer ranges, each equally often, as the plug-in benchmark always had.
@TASKS.register("op_add")
class OpAdd(OperationTask):
    config = OPERATIONS["add"]
    bands = ((-96, 200),)


@TASKS.register("op_sub")
class OpSub(OperationTask):
    config = OPERATIONS["sub"]
    bands = ((-148, 148),)


@TASKS.register("op_mul")
class OpMul(OperationTask):
    config = OPERATIONS["mul"]
    bands = RANGES
