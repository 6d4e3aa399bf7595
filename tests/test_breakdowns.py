"""Accuracy breakdowns by number of operands and operator pattern (Task 2's §4.7.4 tables)."""

import numpy as np

from redkit.metrics import accuracy_by
from redkit_experiments.arithmetic.generate import DataConfig, generate
from redkit_experiments.arithmetic.groups import structure_groups


def test_accuracy_by_counts_each_group():
    pred, true = np.array([1, 2, 3, 4, 5]), np.array([1, 0, 3, 0, 0])
    by = accuracy_by(pred, true, ["a", "a", "b", "b", "b"])
    assert by == {"a": {"n": 2, "accuracy": 0.5}, "b": {"n": 3, "accuracy": 1 / 3}}


def test_task2_groups_follow_the_structures():
    examples = generate(DataConfig(task="task2", n=500, seed=1))["test"]
    groups = structure_groups(examples)
    assert set(groups) == {"operands", "pattern"}
    for ex, operands, pattern in zip(examples, groups["operands"], groups["pattern"]):
        assert int(operands) == len(pattern) + 1 == ex.num_ops + 1
        assert all(op in ex.structure for op in pattern)


def test_task1_has_no_breakdown():
    assert structure_groups(generate(DataConfig(task="task1", n=500, seed=1))["test"]) == {}
