"""Decomposed execution (paper §4.8): operation experts trained alone, a router over operations,
and programs executed step by step through backbone -> router -> composition."""

from redkit_experiments.steps.run import StepsConfig, StepsRun  # noqa: F401
