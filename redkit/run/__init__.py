"""Runs: a directory with a config, data, modules, log, timings and results (base.py); a run on
texts through a Hugging Face backbone (text.py); their configs (config.py); every kind by name and
`open_run` (kinds.py). The kinds themselves live with what they run: your labelled text in
redkit/fitting, the paper's benchmarks in the redkit_experiments plug-in."""

from redkit.run.base import Run  # noqa: F401
from redkit.run.config import DEFAULT_STAGE_OVERRIDES, StagedConfig, TextConfig  # noqa: F401
from redkit.run.kinds import RUN_KINDS, open_run  # noqa: F401
from redkit.run.text import TextRun  # noqa: F401
