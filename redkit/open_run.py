"""Open any trained run directory as the right kind of run, by what its config.json says."""

import json
from pathlib import Path

from redkit.errors import RedkitError


def open_run(path: Path):
    """A text run (task1, task2), a steps run, a fit run or a digits run."""
    from redkit.digits.run import DigitsRun
    from redkit.run import Run
    from redkit.steps import StepsRun

    saved = Path(path) / "config.json"
    if not saved.is_file():
        raise RedkitError(f"{path}: not a redkit run (no config.json)")
    try:
        config = json.loads(saved.read_text())
        task = config.get("task")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as err:
        raise RedkitError(f"{saved}: not a redkit run config ({err})") from None
    if task == "steps":
        return StepsRun(path)
    if task == "fit":
        from redkit.fitting.run import FitRun

        return FitRun(path)
    if "test_ratio" in config:  # only a digits run has a test ratio (its data has no fixed splits)
        return DigitsRun(path)
    return Run(path)
