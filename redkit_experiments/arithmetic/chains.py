"""Arithmetic chains drawn exactly uniformly under value constraints, and the text task built on them.

Task 2, the operation-expert data and the decomposer data are all chains `a op b op c ...`
evaluated left to right; they differ only in the number of operations, the operators, the operand
ranges and whether every intermediate value must stay in 2..100. `ChainConfig` holds those
differences and `ChainTask` does the rest, so the three generators are a config and a few names.

Sampling is constructive, not rejection: the paper's recipe ("draw operators and operands
uniformly, resample if the result is out of range") conditioned on the answer's range is the
uniform distribution over the valid chains of that range, and a backward count of valid
completions (`ChainSpace`) draws from it exactly in a handful of bisections, even for ranges where
rejection would throw away 95 % of its draws (two-operand chains in 81..100).
"""

import bisect
import functools
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

import redkit_experiments.arithmetic.phrasing as phrasing
from redkit.errors import RedkitError
from redkit_experiments.arithmetic import programs  # module import: programs imports the arithmetic data in turn
from redkit_experiments.arithmetic.expression import OPERATORS, Expression
from redkit_experiments.arithmetic.tasks import TextTask

Range = tuple[int, int]  # inclusive


@dataclass(frozen=True)
class ChainConfig:
    num_ops: tuple[tuple[int, float], ...]  # (number of operations, probability) pairs
    operators: tuple[str, ...] = ("+", "-")  # proposed uniformly at each step, then kept only in valid chains
    first_operand: Range = (2, 50)
    operand: Range = (2, 50)  # every operand after the first
    intermediate: Range | None = None  # when set, every step value (not just the answer) must lie here

    def __post_init__(self):
        if abs(sum(p for _, p in self.num_ops) - 1) > 1e-9 or any(n < 1 for n, _ in self.num_ops):
            raise RedkitError(f"num_ops {self.num_ops} must pair operation counts >= 1 with probabilities summing to 1")
        if unknown := set(self.operators) - set(OPERATORS):
            raise RedkitError(f"unknown operators {sorted(unknown)} (known: {' '.join(OPERATORS)})")


State = tuple[int, bool]  # a partial chain: (its value, whether a + or - has been applied yet)


class ChainSpace:
    """The valid chains with `num_ops` operations whose value lies in `final`, drawn uniformly.

    ways[i][state] counts the ways to finish a chain whose first i + 1 operands are in `state`.
    Drawing the first operand, then each (operator, operand), with probability proportional to the
    ways it leaves open is exactly uniform over whole valid chains.

    A `*` never follows a `+` or `-`: "12 minus 5 plus 9 times 3" is 34 with the usual precedence
    but 48 left to right, and the data must not teach one reading against the other. That is why
    a state remembers whether a + or - has occurred (chains without `*` are unaffected).
    """

    def __init__(self, config: ChainConfig, num_ops: int, final: Range):
        self.config, self.num_ops = config, num_ops
        reach = [{(x, False) for x in range(config.first_operand[0], config.first_operand[1] + 1)}]
        for i in range(num_ops):  # reach[i]: the states of the first i + 1 operands
            reach.append({after for state in reach[i] for _, _, after in self._moves(state)})
        self.ways: list[dict[State, int]] = [{} for _ in reach]
        self.ways[num_ops] = {state: 1 for state in reach[num_ops] if final[0] <= state[0] <= final[1]}
        for i in range(num_ops - 1, -1, -1):
            later = self.ways[i + 1]
            self.ways[i] = {
                state: n for state in reach[i] if (n := sum(later.get(after, 0) for _, _, after in self._moves(state)))
            }
        if not self.ways[0]:
            raise RedkitError(
                f"no chain with {num_ops} operations has a value in {final[0]}..{final[1]} under {config}"
            )
        self._tables: dict[tuple[int, State | None], tuple[list[tuple], list[int]]] = {}

    def _moves(self, state: State) -> Iterator[tuple[str, int, State]]:
        """Every (operator, operand, next state) that keeps the intermediate values legal."""
        value, summed = state
        bounds = self.config.intermediate
        for op in self.config.operators:
            if op == "*" and summed:
                continue
            for x in range(self.config.operand[0], self.config.operand[1] + 1):
                w = OPERATORS[op](value, x)
                if bounds is None or bounds[0] <= w <= bounds[1]:
                    yield op, x, (w, summed or op != "*")

    def _table(self, i: int, state: State | None) -> tuple[list[tuple], list[int]]:
        """The moves after i + 1 operands (i = -1: the first operand), with cumulative weights;
        cached, since every draw of a dataset revisits the same few hundred states."""
        if (i, state) not in self._tables:
            if i < 0:
                moves, weights = (
                    [(None, value, (value, summed)) for value, summed in sorted(self.ways[0])],
                    self.ways[0],
                )
            else:
                moves, weights = list(self._moves(state)), self.ways[i + 1]
            moves = [move for move in moves if weights.get(move[2])]
            self._tables[i, state] = moves, list(itertools.accumulate(weights[after] for *_, after in moves))
        return self._tables[i, state]

    def _pick(self, rng: random.Random, i: int, state: State | None) -> tuple:
        moves, cumulative = self._table(i, state)
        return moves[bisect.bisect_right(cumulative, rng.random() * cumulative[-1])]

    def all(self) -> list[Expression]:
        """Every valid chain, in a fixed order (for small spaces: one operation has a few thousand)."""
        out: list[Expression] = []

        def walk(i: int, state: State, operands: tuple[int, ...], operators: tuple[str, ...]) -> None:
            if i == self.num_ops:
                out.append(Expression(operands, operators))
                return
            for op, x, after in self._table(i, state)[0]:
                walk(i + 1, after, operands + (x,), operators + (op,))

        for _, first, state in self._table(-1, None)[0]:
            walk(0, state, (first,), ())
        return out

    def sample(self, rng: random.Random) -> Expression:
        _, first, state = self._pick(rng, -1, None)
        operands, operators = [first], []
        for i in range(self.num_ops):
            op, x, state = self._pick(rng, i, state)
            operands.append(x)
            operators.append(op)
        return Expression(tuple(operands), tuple(operators))


@functools.cache
def chain_space(config: ChainConfig, num_ops: int, final: Range) -> ChainSpace:
    """Shared across task instances: a space costs a few milliseconds to count, nothing to reuse."""
    return ChainSpace(config, num_ops, final)


class ChainTask(TextTask):
    """A text task over chains: subclasses set `config` (and may change the styles or record fields)."""

    config: ChainConfig
    train_templates = phrasing.TRAIN_STYLES  # style names, see phrasing.py
    heldout_templates = phrasing.HELDOUT_STYLES

    def __init__(self, config: ChainConfig | None = None):
        self.config = config or self.config
        self._lengths = [n for n, _ in self.config.num_ops]
        self._cumulative = list(itertools.accumulate(p for _, p in self.config.num_ops))

    def space(self, num_ops: int, band: int) -> ChainSpace:
        return chain_space(self.config, num_ops, self.bands[band])

    def sample(self, rng: random.Random, band: int) -> Expression:
        """Draw the length from config.num_ops, then a uniform valid chain of that length and band."""
        i = min(bisect.bisect_right(self._cumulative, rng.random()), len(self._lengths) - 1)
        return self.space(self._lengths[i], band).sample(rng)

    def render(self, expression: Expression, template: str) -> str:
        return phrasing.STYLES[template](expression.operands, expression.operators)

    def record_fields(self, expression: Expression) -> dict:
        """Every chain record carries its ground-truth step program."""
        return {"program": programs.render_program(programs.program_from_expression(expression))}
