"""Open any trained run directory as the right kind of run, by what its config.json says."""

from pathlib import Path

from redkit.errors import RedkitError
from redkit.jsonfile import read_json


def open_run(path: Path):
    """A text run (task1, task2), a steps run, a fit run or a digits run."""
    from redkit.digits.run import DigitsRun
    from redkit.run import Run
    from redkit.steps import StepsRun

    saved = Path(path) / "config.json"
    if not saved.is_file():
        raise RedkitError(f"{path}: not a redkit run (no config.json)")
    config = read_json(saved, "a redkit run config")
    if not isinstance(config, dict):
        raise RedkitError(f"{saved}: not a redkit run config (a JSON {type(config).__name__}, not an object)")
    task = config.get("task")
    if task == "steps":
        return StepsRun(path)
    if task == "fit":
        from redkit.fitting.run import FitRun

        return FitRun(path)
    if "test_ratio" in config:  # only a digits run has a test ratio (its data has no fixed splits)
        return DigitsRun(path)
    return Run(path)
