"""How an operand/operator chain is said in words: the styles shared by Task 2, the operation
experts and the step decomposer.

A *style* is a function of the whole operand/operator sequence rather than a format string,
because the paper's phrasings change shape with the chain: "If you subtract 5 from 12 and add 9,
what do you get?" reorders the first step and joins the others with commas and "and". Tasks list
style *names* as their templates, so generate.py handles them exactly like task1's format strings.

Training and held-out styles are disjoint sets of phrasings (docs/guides/design.md, decision 10). A held-out
style is a new sentence frame ("Find the value of ...", "... equals what?") around operator words
and word orders that training teaches elsewhere, as a reader meets a new way of asking:
"Subtract 3 from the result of 12 minus 5 plus 9." says the "Take 3 away from the result of ..."
of `take_from` with the verb of `if_you`'s "subtract 5 from 12", and "Begin with 12, decrease it
by 5, ..." says the steps of `start` with the verbs of `think_of`. An operator word that no
training sentence contains could not be learnt from this data by any model; it would test the
backbone's pretraining rather than the method.
"""

from collections.abc import Callable, Sequence

Style = Callable[[Sequence[int], Sequence[str]], str]  # (operands (n,), operators (n - 1,)) -> text

WORDS = {"+": "plus", "-": "minus", "*": "times"}  # "12 minus 5"
APPLY = {"+": "add {x}", "-": "subtract {x}", "*": "multiply by {x}"}  # "..., then add 9"
FIRST = {"+": "add {b} to {a}", "-": "subtract {b} from {a}", "*": "multiply {a} by {b}"}  # "If you subtract 5 from 12"
TAKE = {"+": "add {x}", "-": "take away {x}", "*": "multiply by {x}"}  # "Start with 12, take away 5, ..."
CHANGE = {
    "+": "increase it by {x}",
    "-": "decrease it by {x}",
    "*": "multiply it by {x}",
}  # "..., then decrease it by 9"
TAKE_FIRST = {"+": "increase {a} by {b}", "-": "take {b} away from {a}", "*": "scale {a} by a factor of {b}"}
# The last operand named first: "3 less than the result of 12 minus 5".
LAST_FIRST = {"+": "{b} more than {a}", "-": "{b} less than {a}", "*": "{b} multiplied by {a}"}


def spoken(operands: Sequence[int], operators: Sequence[str]) -> str:
    """'12 minus 5 plus 9': the chain in words, read left to right."""
    parts = [str(operands[0])]
    for op, x in zip(operators, operands[1:]):
        parts += [WORDS[op], str(x)]
    return " ".join(parts)


def question(operands: Sequence[int], operators: Sequence[str]) -> str:
    """'What is 12 minus 5 plus 9?': also the exact text an operation expert is asked per step."""
    return f"What is {spoken(operands, operators)}?"


def _later(table: dict[str, str], operands: Sequence[int], operators: Sequence[str]) -> list[str]:
    """The steps after the first, each phrased from `table`: ['add 9', 'subtract 3']."""
    return [table[op].format(x=x) for op, x in zip(operators[1:], operands[2:])]


def _listing(parts: list[str], last: str = " and ") -> str:
    """'a', 'a and b', 'a, b and c'."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + last + parts[-1]


def _first(table: dict[str, str], operands: Sequence[int], operators: Sequence[str]) -> str:
    return table[operators[0]].format(a=operands[0], b=operands[1])


# --- training styles --------------------------------------------------------------------------


def compute(operands, operators):
    """'Compute 12 minus 5, then add 9.' (the paper's §4.2.4 example)"""
    head = spoken(operands[:2], operators[:1])
    return f"Compute {head}" + "".join(f", then {step}" for step in _later(APPLY, operands, operators)) + "."


def if_you(operands, operators):
    """'If you subtract 5 from 12 and add 9, what do you get?' (the paper's §4.2.4 example)"""
    return f"If you {_listing([_first(FIRST, operands, operators)] + _later(APPLY, operands, operators))}, what do you get?"


def start(operands, operators):
    """'Start with 12, take away 5, add 9. What is the result?'"""
    steps = [TAKE[op].format(x=x) for op, x in zip(operators, operands[1:])]
    return f"Start with {operands[0]}, {', '.join(steps)}. What is the result?"


def verbal(operands, operators):
    """'Take 5 away from 12, then increase it by 9. What is the answer?' (reordered first step)"""
    text = _first(TAKE_FIRST, operands, operators) + "".join(f", then {s}" for s in _later(CHANGE, operands, operators))
    return f"{text[0].upper()}{text[1:]}. What is the answer?"


def think_of(operands, operators):
    """'Think of 12. Decrease it by 5, then increase it by 9. What do you have now?'"""
    steps = [CHANGE[op].format(x=x) for op, x in zip(operators, operands[1:])]
    return f"Think of {operands[0]}. {', then '.join(steps).capitalize()}. What do you have now?"


def _result_of(operands, operators) -> str:
    """'the result of 12 minus 5', or just '12' when there is no operation to take the result of."""
    prefix = spoken(operands, operators)
    return f"the result of {prefix}" if operators else prefix


def less_than(operands, operators):
    """'What is 3 less than the result of 12 minus 5 plus 9?' (the last operand named first)"""
    return f"What is {LAST_FIRST[operators[-1]].format(a=_result_of(operands[:-1], operators[:-1]), b=operands[-1])}?"


def symbols(operands, operators):
    """'Calculate 12 - 5 + 9.'"""
    return "Calculate " + " ".join([str(operands[0])] + [f"{op} {x}" for op, x in zip(operators, operands[1:])]) + "."


def take_from(operands, operators):
    """'Take 3 away from the result of 12 minus 5 plus 9. What is the outcome?' (the last step named first)"""
    text = TAKE_FIRST[operators[-1]].format(a=_result_of(operands[:-1], operators[:-1]), b=operands[-1])
    return f"{text[0].upper()}{text[1:]}. What is the outcome?"


# --- held-out styles --------------------------------------------------------------------------


def find(operands, operators):
    """'Find the value of 12 minus 5 plus 9.'"""
    return f"Find the value of {spoken(operands, operators)}."


def equals(operands, operators):
    """'12 minus 5 plus 9 equals what?'"""
    return f"{spoken(operands, operators)} equals what?"


def begin(operands, operators):
    """'Begin with 12, decrease it by 5, then increase it by 9. What number do you end up with?'"""
    steps = [CHANGE[op].format(x=x) for op, x in zip(operators, operands[1:])]
    return f"Begin with {operands[0]}, {', then '.join(steps)}. What number do you end up with?"


def take_away(operands, operators):
    """'What do you get when you take 5 away from 12 and then add 9?' (reordered first step)"""
    parts = [_first(TAKE_FIRST, operands, operators)] + _later(TAKE, operands, operators)
    return f"What do you get when you {_listing(parts, last=' and then ')}?"


def result_of(operands, operators):
    """'Subtract 3 from the result of 12 minus 5 plus 9.' (the last step named first)"""
    text = FIRST[operators[-1]].format(a=_result_of(operands[:-1], operators[:-1]), b=operands[-1])
    return text[0].upper() + text[1:] + "."


STYLES: dict[str, Style] = {
    "chain": question,
    "bare": spoken,
    "compute": compute,
    "if_you": if_you,
    "start": start,
    "symbols": symbols,
    "verbal": verbal,
    "less_than": less_than,
    "think_of": think_of,
    "take_from": take_from,
    "find": find,
    "equals": equals,
    "begin": begin,
    "take_away": take_away,
    "result_of": result_of,
}
TRAIN_STYLES = (
    "chain",
    "compute",
    "if_you",
    "start",
    "symbols",
    "bare",
    "verbal",
    "less_than",
    "think_of",
    "take_from",
)
HELDOUT_STYLES = ("find", "begin", "take_away", "result_of", "equals")
assert not set(TRAIN_STYLES) & set(HELDOUT_STYLES) and set(TRAIN_STYLES) | set(HELDOUT_STYLES) == set(STYLES)
