"""Seed 003's toy experiments: linear experts mix, MLP experts do not, residual experts on a base do.

    from redkit.toy import ToyConfig, reproduce_toy, format_tables
    results = reproduce_toy(Path("runs/toy"), ToyConfig(seed=0))
    print(format_tables(results))
"""

from redkit.toy.experiments import ToyConfig, reproduce_toy
from redkit.toy.report import format_tables

__all__ = ["ToyConfig", "reproduce_toy", "format_tables"]
