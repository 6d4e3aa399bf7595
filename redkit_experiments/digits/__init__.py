"""The 5-domain handwritten-digits benchmark (the original code's MNIST label-pair benchmark) on redkit's
own stages, compositions and evaluation: an MLP backbone on images replaces the language model,
and everything after the features is shared with Task 1.

    from redkit_experiments.digits import DigitsConfig, reproduce_digits
    results = reproduce_digits(Path("runs/digits"), DigitsConfig(seed=0), run_mode="all")
"""

from redkit_experiments.digits.benchmark import RUN_MODES, reproduce_digits
from redkit_experiments.digits.config import DigitsConfig
from redkit_experiments.digits.run import DigitsRun

__all__ = ["DigitsConfig", "DigitsRun", "RUN_MODES", "reproduce_digits"]
