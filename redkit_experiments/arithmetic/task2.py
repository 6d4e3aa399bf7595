"""Task 2: multi-step mixed arithmetic, "What is 12 minus 5 plus 9?" (paper §4.1, §4.2.3-4.2.4).

docs/guides/design.md, decision 7: 2/3/4 operands at 50/30/20 %, each operator + or - with equal probability,
operands 2..50, and only the final result constrained to 2..100 (intermediate values may leave
it, e.g. 5 - 30 + 40). Every range R1..R5 gets the same number of examples: within a range and a
length, a chain is uniform among the valid ones, which is what "resample until valid" gives.
Balancing the ranges makes + the more frequent operator overall (about 68 % at 80k; 35 % in R1,
92 % in R5), because high answers need additions; the proposal itself is 50/50.
Questions use the shared phrasing styles: training ones include the paper's three examples.
"""

from redkit_experiments.arithmetic.chains import ChainConfig, ChainTask
from redkit_experiments.arithmetic.tasks import TASKS

TASK2 = ChainConfig(
    num_ops=((1, 0.5), (2, 0.3), (3, 0.2)), operators=("+", "-"), first_operand=(2, 50), operand=(2, 50)
)


@TASKS.register("task2")
class Task2(ChainTask):
    config = TASK2
