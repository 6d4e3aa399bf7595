"""Atomic writes: a file is either its old self or its complete new self, never half-written.

Everything redkit writes (data, configs, modules, checkpoints, results) goes through these, so a
crash or a kill at any moment loses at most the file being written and never corrupts one.
"""

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success, rename it over `path` (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


def write_yaml(path: str | Path, obj: Any) -> None:
    """`obj` (JSON-like: dicts, lists, tuples, scalars) as block-style YAML, keys in their order."""
    import yaml

    write_text(path, yaml.safe_dump(json.loads(json.dumps(obj)), sort_keys=False, allow_unicode=True))
