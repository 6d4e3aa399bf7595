"""Every kind of run, by the task its config.json records, and `open_run`: any run directory opened
as its kind. A kind registers its class here from its own module (`@RUN_KINDS.register("fit")`);
the library's kinds and the plug-ins' are loaded at the top (redkit/plugins.py: the command line,
redkit.load) before a run is opened.
"""

from pathlib import Path

from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.registry import Registry

RUN_KINDS: Registry[type] = Registry("run task")


def open_run(path: Path):
    """A run of any registered kind (a fit run; the plug-ins' task1, task2, steps, digits runs)."""
    saved = Path(path) / "config.json"
    if not saved.is_file():
        raise RedkitError(f"{path}: not a redkit run (no config.json)")
    config = read_json(saved, "a redkit run config")
    if not isinstance(config, dict):
        raise RedkitError(f"{saved}: not a redkit run config (a JSON {type(config).__name__}, not an object)")
    if not isinstance(config.get("task"), str):
        raise RedkitError(f"{saved}: field 'task' is missing or not a string (a run made by an older redkit: rerun it)")
    if config["task"] not in RUN_KINDS:  # its kind comes from a plug-in the caller has not loaded
        raise RedkitError(
            f"{saved}: a {config['task']!r} run, a kind none of the loaded packages registers "
            f"(known: {', '.join(RUN_KINDS.names())}); redkit.load() and the command line load the plug-ins"
        )
    return RUN_KINDS[config["task"]](path)
