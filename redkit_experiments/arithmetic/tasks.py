"""What a text task is, and the registry of tasks ("task1", and more as they are added).

A task knows how to draw an expression whose answer lies in a given range, and how to phrase it
with a template. Everything else (balancing, splitting, writing) is shared: see generate.py.
"""

import random

from redkit.registry import Registry
from redkit_experiments.arithmetic.expression import Expression
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.arithmetic.vocabulary import RANGES


class TextTask:
    # The answer bands the generator balances over, (low, high) inclusive: every split holds the
    # same number of examples per band. The five answer ranges R1..R5 by default; a task whose
    # answers leave 2..100 (the operation experts' steps) sets its own.
    bands: tuple[tuple[int, int], ...] = RANGES
    train_templates: tuple[str, ...] = ()
    heldout_templates: tuple[str, ...] = ()  # disjoint from train_templates: never seen in training
    default_n: int = 80_000  # the dataset size the paper used for this task (train + val + test)

    def sample(self, rng: random.Random, band: int) -> Expression:
        """An expression whose value lies in `bands[band]`."""
        raise NotImplementedError

    def render(self, expression: Expression, template: str) -> str:
        """The question text. A template is whatever the task's render understands: a format
        string (task1) or the name of a phrasing style (chain tasks, see phrasing.py)."""
        raise NotImplementedError

    def record_fields(self, expression: Expression) -> dict:
        """Extra Example fields for this expression, e.g. {"program": ...}; none by default."""
        return {}

    @classmethod
    def record_json(cls, example: Example) -> dict:
        """The JSON row written for an example; a task may rename fields to match a published format."""
        return example.to_json()


TASKS: Registry[type[TextTask]] = Registry("task")
