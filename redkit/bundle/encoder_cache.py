"""The serving graph's encoder, exported once and read back: most of an export's time is the backbone's trace
(on this 2-core CPU about 10 of a MiniLM run's 14 s), and the backbone is the part a change of domains leaves alone.

    $REDKIT_CACHE/serving-encoders/<key>.onnx     (REDKIT_CACHE unset: $XDG_CACHE_HOME/redkit, else ~/.cache/redkit)

The key is the sha256 of everything the encoder's graph is a function of (`encoder_key`): the encoder's fingerprint
(the source weights, where the model is split, the pooling and the tuned top; a run of tuned owners': every owner's
top too), the pretrained backbone's where a nearest-neighbour score rides along, the exporter's versions and opset,
and the source of the code it traces. So a hit is the graph a fresh export of the same encoder would give: adding or
removing a domain (the life cycle, `redkit serve`'s admin routes), an owner joining a federation and every run of
the replay-free recipe on one backbone export only their small head; a run whose top was tuned again, or another
backbone, misses. Whatever is read from here is checked again as part of the whole graph (graph.py `_check`: ONNX
Runtime against the run's modules), and an entry that fails to load is removed and the encoder exported afresh.

At most MAX_ENTRIES encoders and MAX_BYTES in all are kept: writing one removes the least recently used (a hit
touches its file). REDKIT_CACHE=off keeps nothing. Entries are written atomically (a temporary name, renamed).
"""

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

from redkit.atomic import atomic_path

ENV = "REDKIT_CACHE"
FOLDER = "serving-encoders"
MAX_ENTRIES = 8
MAX_BYTES = 2 << 30  # 2 GiB: eight MiniLM encoders are 0.7 GiB; one Qwen3-0.6B's (2.4 GB) is never kept
# The code the encoder's graph is a trace of: a change to any of them is another graph.
TRACED = (
    "backbone/model.py",
    "fitting/tuned_encoder.py",
    "incremental/tuned.py",
    "references/linear_probe.py",
    "bundle/graph.py",
)


def cache_dir() -> Path | None:
    """Where encoders are kept, or None when REDKIT_CACHE is "off"."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("off", "") else Path(chosen) / FOLDER
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "redkit" / FOLDER


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def encoder_key(identity: dict, opset: int) -> str:
    """The cache key of an encoder whose graph `identity` describes (graph.py ServingFeatures.identity)."""
    root = Path(__file__).resolve().parent.parent  # redkit/
    digest = hashlib.sha256(json.dumps({"identity": identity, "opset": opset}, sort_keys=True).encode())
    for package in ("torch", "onnxscript", "onnx-ir", "onnx"):
        digest.update(f"{package}={_version(package)};".encode())
    for relative in TRACED:
        digest.update((root / relative).read_bytes())
    return digest.hexdigest()


def cached(key: str) -> Path | None:
    """The kept encoder of `key`, touched (the most recently used now), or None."""
    folder = cache_dir()
    path = folder / f"{key}.onnx" if folder else None
    if path is None or not path.is_file():
        return None
    try:
        path.touch()
    except OSError:  # another process removed it meanwhile
        return None
    return path if path.is_file() else None


def keep(key: str, write) -> Path | None:
    """`write(path)` the encoder of `key` into the cache, then remove the least recently used beyond the limits;
    its path, or None where nothing is kept (REDKIT_CACHE=off, an unwritable folder, an encoder over MAX_BYTES)."""
    folder = cache_dir()
    if folder is None:
        return None
    path = folder / f"{key}.onnx"
    try:
        with atomic_path(path) as tmp:
            write(tmp)
            if tmp.stat().st_size > MAX_BYTES:
                raise OSError("larger than the cache")
    except OSError:
        return None
    _evict(folder)
    return path if path.is_file() else None


def forget(key: str) -> None:
    """Remove the entry of `key` (one that did not load)."""
    folder = cache_dir()
    if folder is not None:
        (folder / f"{key}.onnx").unlink(missing_ok=True)


def _evict(folder: Path) -> None:
    entries = []
    for path in folder.glob("*.onnx"):
        try:
            entries.append((path.stat().st_mtime, path.stat().st_size, path))
        except OSError:  # removed by another process meanwhile
            continue
    entries.sort(reverse=True)  # the most recently used first
    total = 0
    for rank, (_, size, path) in enumerate(entries):
        total += size
        if rank >= MAX_ENTRIES or total > MAX_BYTES:
            path.unlink(missing_ok=True)
