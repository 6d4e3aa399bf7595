"""Open any trained run directory as the right kind of run, by the task its config.json records.

Each kind of run registers its class under its task(s) in RUN_KINDS, in its own module; the
modules are named here as plugins (imported by name, only until the task turns up), so that this
leaf imports none of them and any of them may import it.
"""

from pathlib import Path

from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.registry import Registry

RUN_KINDS: Registry[type] = Registry("run task", plugins=("redkit.run", "redkit.fitting.run", "redkit.steps.run",
                                                         "redkit.digits.run"))


def open_run(path: Path):
    """A text run (task1, task2), a steps run, a fit run or a digits run."""
    saved = Path(path) / "config.json"
    if not saved.is_file():
        raise RedkitError(f"{path}: not a redkit run (no config.json)")
    config = read_json(saved, "a redkit run config")
    if not isinstance(config, dict):
        raise RedkitError(f"{saved}: not a redkit run config (a JSON {type(config).__name__}, not an object)")
    if not isinstance(config.get("task"), str):
        raise RedkitError(f"{saved}: field 'task' is missing or not a string (a run made by an older redkit: rerun it)")
    return RUN_KINDS[config["task"]](path)
