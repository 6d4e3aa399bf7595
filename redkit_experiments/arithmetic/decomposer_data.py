"""Step-decomposer data: a question and its step program (paper §4.2.7, docs/guides/design.md, decisions 7, 9).

2/3/4 operations at 20/40/40 %, operands 2..50, the final answer in 2..100 and intermediate values
free to leave it as they do in Task 2 ("5 minus 30 plus 40": x1 = -25), so that decomposition
answers every Task 2 question. (A first version kept every intermediate in 2..100, which left a
tenth of Task 2 unanswerable.) Every step still lies inside the operation experts' data
(operations.py): to end in 2..100, a four-operation chain's left operands stay in -98..150.
The first operand stays in 2..50 like Task 2's, whose questions are what the decomposer reads.

Records follow the paper's field names: `id, expr, answer, label, domain, num_steps, program`
(plus redkit's `template` and `structure`); records.read_jsonl reads them back. "decomposer_times"
also draws `*` steps, for the multiplication plug-in expert; it keeps every
intermediate value in 2..100, the only products the multiplication expert knows.
"""

from dataclasses import replace

from redkit_experiments.arithmetic.chains import ChainConfig, ChainTask
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.arithmetic.vocabulary import VOCABULARY

DECOMPOSER = ChainConfig(
    num_ops=((2, 0.2), (3, 0.4), (4, 0.4)), operators=("+", "-"), first_operand=(2, 50), operand=(2, 50)
)
DECOMPOSER_TIMES = replace(DECOMPOSER, operators=("+", "-", "*"), intermediate=VOCABULARY)
PAPER_NAMES = {"question": "expr", "num_ops": "num_steps"}  # redkit's field -> the paper's
PAPER_FIELDS = ("id", "expr", "answer", "label", "domain", "num_steps", "program")  # §4.2.7, in its order


@TASKS.register("decomposer")
class Decomposer(ChainTask):
    config = DECOMPOSER

    @classmethod
    def record_json(cls, example: Example) -> dict:
        row = {PAPER_NAMES.get(key, key): value for key, value in example.to_json().items()}
        return {key: row[key] for key in PAPER_FIELDS} | row


@TASKS.register("decomposer_times")
class DecomposerTimes(Decomposer):
    config = DECOMPOSER_TIMES
