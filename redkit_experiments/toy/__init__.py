"""The toy experiments (docs/guides/design.md, the sources): linear experts mix, MLP experts do not, residual experts on a base do.

from redkit_experiments.toy import ToyConfig, reproduce_toy, format_tables
results = reproduce_toy(Path("runs/toy"), ToyConfig(seed=0))
print(format_tables(results))
"""

from redkit_experiments.toy.experiments import ToyConfig, reproduce_toy
from redkit_experiments.toy.report import format_tables

__all__ = ["ToyConfig", "reproduce_toy", "format_tables"]
