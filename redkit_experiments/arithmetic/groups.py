"""Per-example keys that accuracy is broken down by (a leaf: runs and the pipeline both need it)."""

from redkit_experiments.arithmetic.expression import OPERATORS
from redkit_experiments.arithmetic.records import Example


def structure_groups(examples: list[Example]) -> dict[str, list[str]]:
    """Per-example keys for accuracy breakdowns, where a task varies them: the number of operands
    and the operator pattern ("+-" for "12 plus 5 minus 3") of each question."""
    groups = {
        "operands": [str(ex.num_ops + 1) for ex in examples],
        "pattern": ["".join(ch for ch in ex.structure if ch in OPERATORS) for ex in examples],
    }
    return {name: keys for name, keys in groups.items() if len(set(keys)) > 1}
