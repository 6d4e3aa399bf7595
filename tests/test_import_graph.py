"""The library's import graph: no circle, and nothing in it imports the paper's experiments.

Every import counts, module-level or inside a function, TYPE_CHECKING included (an import inside a
function still says that the importing module needs the imported one), and so does a module named by
a string (`importlib.import_module("redkit.x")`, a plug-in list): a registry that names the modules
filling it points the wrong way. The plug-ins are declared as entry points in pyproject.toml and
loaded at run time by the top (redkit/plugins.py, called by the command line and the API), as pytest
loads its plug-ins: a plug-in may use the API that loads it, so those declarations are checked
apart, not as edges of the graph.
"""

import ast
import graphlib
from pathlib import Path

import tomllib

import redkit

ROOT = Path(redkit.__file__).resolve().parent.parent
PACKAGES = ("redkit", "redkit_experiments")
CONTAINERS = {"set", "frozenset", "tuple", "list", "dict"}  # builtins that hold names and load nothing


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(f): f for package in PACKAGES for f in (ROOT / package).rglob("*.py")}


def entry_point_modules() -> list[str]:
    """The modules pyproject.toml declares as redkit's plug-ins (every entry-point group of redkit)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [
        value.split(":")[0]
        for group, entries in project.get("entry-points", {}).items()
        if group.startswith("redkit.")
        for value in entries.values()
    ]


def named_modules(node: ast.Call | ast.Assign, known: dict[str, Path]) -> set[str]:
    """Module names given as strings to a call (`import_module("redkit.x")`, `Registry(..., plugins=(...))`)
    or assigned to a *PLUGINS* name: what a registry or loader would import by name."""
    if isinstance(node, ast.Assign):
        if not any(isinstance(t, ast.Name) and "PLUGIN" in t.id.upper() for t in node.targets):
            return set()
        values = [node.value]
    elif isinstance(node.func, ast.Name) and node.func.id in CONTAINERS:
        return set()  # a set or tuple of names imports nothing (source.py's modules it does *not* read, say)
    else:
        values = [*node.args, *(k.value for k in node.keywords)]
    found = set()
    for value in values:
        for leaf in ast.walk(value):
            if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and leaf.value in known:
                found.add(leaf.value)
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the modules of redkit and redkit_experiments it imports, by statement or by name}."""
    known = modules()
    graph = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` steps up
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets |= {base} | {f"{base}.{alias.name}" for alias in node.names}
            elif isinstance(node, (ast.Call, ast.Assign)):  # a module named by a string, to be imported
                targets |= named_modules(node, known)
        found = set()
        for target in targets:
            while target and target not in known:  # `from redkit.x import name`: the module redkit.x
                target = target.rpartition(".")[0]
            if target and target not in (name, *PACKAGES):
                found.add(target)
        graph[name] = found
    return graph


def test_the_import_graph_finds_the_library_and_the_plug_ins():
    graph = import_graph()
    assert "redkit.train.stages" in graph["redkit.pipeline"] and "redkit.train.ranks" in graph["redkit.train.loop"]
    assert set(entry_point_modules()) == {"redkit.registrants", "redkit_experiments.plugin", "redkit_experiments.cli"}
    assert all(module in graph for module in entry_point_modules())


def test_no_import_circle_even_through_names():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"import circle: {' -> '.join(err.args[1])}") from None


def test_nothing_in_the_library_imports_an_experiment():
    """Only the entry points (redkit.plugins, the top) reach redkit_experiments."""
    graph = import_graph()
    crossing = {
        name: sorted(t for t in targets if t.split(".")[0] == "redkit_experiments")
        for name, targets in graph.items()
        if name.split(".")[0] == "redkit" and name != "redkit.plugins"
    }
    assert not {name: t for name, t in crossing.items() if t}


def test_a_registry_names_no_module():
    """Registries are filled by the packages that own their entries: none is given module names."""
    for path in (ROOT / "redkit").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "import_module(" not in text and "plugins=(" not in text, path
