"""Data: the answer vocabulary, examples and their JSONL files, and the task generators."""

from redkit.data import task1  # noqa: F401  (registers the task)
from redkit.data import task2, operations, decomposer  # noqa: F401  (in this order in listings)
