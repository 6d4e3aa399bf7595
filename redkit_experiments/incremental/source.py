"""The code one method's figures depend on, as one sha256: what `methods/NAME.json` records and what a resumed
study (or scripts/incremental_merge.py) compares before it trusts a figure it did not just measure.

    the study's own modules (the stream, the data a method may read, the scoring, the metrics, the tuned
    hyperparameters) + the method's module ─► every redkit / redkit_experiments module they import, followed
    statically (ast, nothing imported) ─► sha256 over (path, bytes) of each, in path order

Why per method and not one hash of the whole source tree: a change to RED's owners must not make a study refuse
the fine-tuning strategies' figures, nor oblige anyone to rerun hours of them; a change to anything a strategy
reads (its module, finetune.py, redkit's training loop, the study's scoring) still does.
"""

import ast
import hashlib
from pathlib import Path

import redkit

PACKAGES = ("redkit", "redkit_experiments")
ROOT = Path(redkit.__file__).resolve().parent.parent  # the directory that holds both packages

# What shapes every method's figures. Not report.py (it writes what was measured), nor the methods' registry
# (methods/__init__.py imports every method: each method's own module is added on its own), nor the tuning command.
STUDY = (
    "redkit_experiments.incremental.study",
    "redkit_experiments.incremental.data",
    "redkit_experiments.incremental.protocol",
    "redkit_experiments.incremental.metrics",
    "redkit_experiments.incremental.hyperparameters",
)
NOT_FOLLOWED = frozenset(
    {
        "redkit_experiments.incremental.report",
        "redkit_experiments.incremental.methods",
        "redkit_experiments.incremental.tuning",
    }
)


def module_file(name: str) -> Path | None:
    """`name`'s source file if it is a module of redkit or redkit_experiments, else None."""
    if name.split(".")[0] not in PACKAGES:
        return None
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(name: str, path: Path) -> set[str]:
    """The modules `name` (source at `path`) imports, wherever in the file: at its top or inside a function
    (a lazy import runs when the function does). Not inside a package's PEP 562 `__getattr__`: redkit's imports
    the whole API on first use of `redkit.fit`, and a module that uses the API imports it itself."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    lazy_api = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and fn.name == "__getattr__"
        for node in ast.walk(fn)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in lazy_api:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` above this one
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
    return found


def import_closure(roots: tuple[str, ...]) -> dict[str, Path]:
    """Every redkit / redkit_experiments module reachable from `roots` by imports: {name: source file}."""
    closure, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        if name in closure or (name in NOT_FOLLOWED and name not in roots):
            continue
        path = module_file(name)
        if path is None:
            continue
        closure[name] = path
        todo.extend(imported_modules(name, path))
    return closure


def method_source(module: str) -> str:
    """sha256 of the study's modules and the method's (`module`: where it is registered), with all they import."""
    digest = hashlib.sha256()
    for path in sorted(set(import_closure((*STUDY, module)).values())):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
