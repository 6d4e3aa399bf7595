"""LabelSpace maps classes to the values they stand for; redkit pins the CPU kernels it computes with."""

import numpy as np
import pytest
import torch

from redkit.errors import RedkitError
from redkit.space import LabelSpace
from redkit_experiments.arithmetic.space import ANSWER_RANGES
from redkit_experiments.steps.run import operations_space


def test_answer_ranges_map_2_to_100_onto_99_classes():
    assert ANSWER_RANGES.value_range == (2, 100) and ANSWER_RANGES.num_classes == 99
    assert ANSWER_RANGES.class_of(2) == 0 and ANSWER_RANGES.class_of(100) == 98 and ANSWER_RANGES.value_of(98) == 100
    with pytest.raises(RedkitError, match=r"record 7: answer 101 is outside this run's classes 2..100"):
        ANSWER_RANGES.class_of(101, "record 7")


def test_a_steps_space_holds_every_value_of_its_operations():
    space = operations_space(("add", "sub"))
    assert space == LabelSpace.of_values(-148, 200, ("add", "sub")) and space.num_classes == 349
    values = np.arange(-148, 201)
    classes = np.array([space.class_of(int(v)) for v in values])
    assert (classes == np.arange(349)).all() and (space.value_of(classes) == values).all()
    assert space.value_of(torch.tensor([0, 348])).tolist() == [-148, 200]
    assert operations_space(("add", "sub", "mul")).value_range == (-148, 200)  # mul's 2..100 adds no class
