"""What fills the registries. Every package that registers entries is declared as an entry point in
pyproject.toml, the library's own packages and the paper's experiments (redkit_experiments) alike,
as pytest finds its plug-ins:

    redkit.commands   command-line commands (light: argparse only), read when the command line starts
    redkit.plugins    routers, module kinds, stages, references, compositions, run kinds (these import torch)

The top loads them: the command line (`load_commands` at start, `load_plugins` when a command needs
a run), the API's entry functions, a process a stage starts. Nothing below the top imports by name.
A package of your own plugs in the same way, from its own pyproject.toml:

    [project.entry-points."redkit.plugins"]
    mine = "my_package.redkit_plugin"     # importing it registers its routers, run kinds, ...
"""

from importlib.metadata import entry_points

_loaded: set[str] = set()


def _load(group: str) -> None:
    """Import every package declared in `group`, once per process."""
    if group in _loaded:
        return
    _loaded.add(group)
    entries = sorted(entry_points(group=group), key=lambda e: (not e.value.startswith("redkit."), e.name))
    for entry in entries:  # the library's own first, then the plug-ins by name
        entry.load()


def load_commands() -> None:
    _load("redkit.commands")


def load_plugins() -> None:
    _load("redkit.plugins")
