"""redkit's own import graph has no circle (DESIGN.md; issue 23). Every import counts, module-level or
inside a function, TYPE_CHECKING included, as ../shared/hooks/import_cycles.py counts them: an import
inside a function still says that the importing module needs the imported one."""

import ast
import graphlib
from pathlib import Path

import redkit

ROOT = Path(redkit.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the redkit modules it imports} (the package `redkit` itself, version only, left out)."""
    modules = {module_name(f): f for f in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
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
        found = set()
        for target in targets:
            while target and target not in modules:  # `from redkit.x import name`: the module redkit.x
                target = target.rpartition(".")[0]
            if target and target not in (name, "redkit"):
                found.add(target)
        graph[name] = found
    return graph


def test_the_import_graph_finds_the_library():
    graph = import_graph()
    assert "redkit.train.stages" in graph["redkit.pipeline"] and "redkit.train.ranks" in graph["redkit.train.loop"]


def test_redkit_has_no_import_circle():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"import circle: {' -> '.join(err.args[1])}") from None
