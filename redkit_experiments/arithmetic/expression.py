"""An arithmetic expression as an operand/operator sequence, evaluated left to right.

`Expression((12, 27), ("+",))` is "12 + 27"; its `key` "12+27" is the *structure* that the
structure-disjoint split keeps out of training (docs/guides/design.md, decision 6).
"""

import operator
from dataclasses import dataclass

OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
OPERATION_NAMES = {"+": "add", "-": "sub", "*": "mul"}


@dataclass(frozen=True)
class Expression:
    operands: tuple[int, ...]  # (n,)
    operators: tuple[str, ...]  # (n - 1,), each a key of OPERATORS

    def __post_init__(self):
        assert len(self.operators) == len(self.operands) - 1, "one operator between each pair of operands"

    @property
    def value(self) -> int:
        result = self.operands[0]
        for op, x in zip(self.operators, self.operands[1:]):
            result = OPERATORS[op](result, x)
        return result

    @property
    def key(self) -> str:
        parts = [str(self.operands[0])]
        for op, x in zip(self.operators, self.operands[1:]):
            parts += [op, str(x)]
        return "".join(parts)

    @property
    def num_ops(self) -> int:
        return len(self.operators)
