"""Step-decomposer data: a question and its step program (paper §4.2.7, DESIGN.md decisions 7, 9).

2/3/4 operations at 20/40/40 %, operands 2..50, and every intermediate value in 2..100, so that
executing the program with the operation experts never needs a value outside the vocabulary.
Every step then lies inside the operation experts' data (operations.py): an add step's left
operand is at most 98 and a sub step's at most 100 <= 150. The first operand stays in 2..50 like
Task 2's, whose questions are what the decomposer reads in decomposed execution.

Records follow the paper's field names: `id, expr, answer, label, domain, num_steps, program`
(plus redkit's `template` and `structure`); records.read_jsonl reads them back. "decomposer_times"
also draws `*` steps, for the multiplication plug-in expert (issue 3, item 7).
"""

from dataclasses import replace

from redkit.data.chains import ChainConfig, ChainTask
from redkit.data.records import Example
from redkit.data.tasks import TASKS
from redkit.data.vocabulary import MAX_ANSWER, MIN_ANSWER

DECOMPOSER = ChainConfig(num_ops=((2, 0.2), (3, 0.4), (4, 0.4)), operators=("+", "-"),
                         first_operand=(2, 50), operand=(2, 50), intermediate=(MIN_ANSWER, MAX_ANSWER))
DECOMPOSER_TIMES = replace(DECOMPOSER, operators=("+", "-", "*"))
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
