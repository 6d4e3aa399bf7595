"""The registry of the non-modular references: `Reference` (how to get a reference's class
probabilities for any texts, and which stages train it) and REFERENCES, which each reference
fills from its own module."""

from collections.abc import Callable
from typing import NamedTuple

import torch

from redkit.registry import Registry


class Reference(NamedTuple):
    probs: Callable[..., torch.Tensor]  # (run, cache name, texts) -> (N, C) class probabilities
    stages: tuple[str, ...]  # the stage(s) whose wall time is its training time


REFERENCES: Registry[Reference] = Registry("reference")
