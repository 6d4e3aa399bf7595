"""A bundle's `manifest.json`: what the bundle holds and the proof that it is intact.

    {"format": 1, "redkit_version": "0.1.0", "kind": "task1", "heads": false,
     "files": {"modules/router/model.safetensors": {"size": 134412, "sha256": "..."}, ...},
     "backbone": {...}, "test_metrics": {...}, "source": {"run": "/abs/run", "git_commit": "..."}}

Opening a bundle verifies every listed file (present, same size, same sha256) before anything is
loaded: a bundle is shipped to other machines, and a file altered or cut short in transit would
otherwise load as silently wrong weights. Every listed path is relative and stays inside the bundle.
A file under modules/ or decomposer/ that the manifest does not list, and an unlisted config.json,
oos.json, timings.json or results.json (what a bundle's run reads), is refused: only what the
manifest vouches for is loaded. Other unlisted files are ignored. A bundle whose format is newer
than this redkit reads is refused with the versions involved, since its layout may mean something else.
"""

import hashlib
from importlib import metadata
from pathlib import Path

from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.names import check_name

MANIFEST = "manifest.json"
# The serving graph (redkit/bundle/graph.py), under BUNDLE/serving/ and listed like every other file.
SERVING = "serving"
GRAPH, TOKENIZER, SETTINGS = "model.onnx", "tokenizer.json", "serving.json"
FORMAT = 1  # the bundle layout this redkit writes and the newest it reads
READ = ("config.json", "oos.json", "timings.json", "results.json")  # what a bundle's run reads beside its modules
LOADED = ("modules", "decomposer", SERVING)  # folders whose files a bundle loads (as modules, or its serving graph)


def redkit_version() -> str:
    """The installed distribution's version (what a user upgrades), else the package's own."""
    try:
        return metadata.version("redkit")
    except metadata.PackageNotFoundError:
        from redkit import __version__

        return __version__


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": file_digest(path)}


def is_bundle(directory: str | Path) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def read_manifest(directory: str | Path) -> dict:
    """The manifest of a bundle, its format checked; one line naming the file otherwise."""
    path = Path(directory) / MANIFEST
    manifest = read_json(path, "a bundle manifest")
    if not isinstance(manifest, dict):
        raise RedkitError(f"{path}: not a bundle manifest (expected a JSON object, got {type(manifest).__name__})")
    fmt, files = manifest.get("format"), manifest.get("files")
    if type(fmt) is not int or fmt < 1:
        raise RedkitError(f"{path}: field 'format' must be a positive integer, got {fmt!r}")
    if fmt > FORMAT:
        raise RedkitError(
            f"{directory}: written by redkit {manifest.get('redkit_version', '?')} with bundle format {fmt}; "
            f"this redkit {redkit_version()} reads up to {FORMAT}; upgrade redkit"
        )
    if not isinstance(files, dict) or not all(isinstance(e, dict) for e in files.values()):
        raise RedkitError(f"{path}: field 'files' must map each relative path to {{size, sha256}}")
    return manifest


def _inside(directory: Path, relative: str, listing: Path) -> Path:
    """`directory/relative`, refusing a listed path that escapes the directory (absolute, '..', a
    link that points out of it) or whose components are not plain names (redkit/names.py)."""
    if not relative.isprintable():  # "\r" or "\n" in a name would also break the one-line error below
        raise RedkitError(f"{listing}: file path {relative!r} is not a printable file name")
    path = directory / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts or not relative:
        raise RedkitError(f"{listing}: file path {relative!r} leaves {directory.name}")
    for part in relative.split("/"):
        check_name(part, "component", f"{listing}: file path {relative!r}", reserved=False)
    if not path.resolve().is_relative_to(directory.resolve()):
        raise RedkitError(f"{listing}: file path {relative!r} leaves {directory.name} (through a link)")
    return path


def verify_bundle(directory: str | Path) -> dict:
    """The manifest, after checking that every file it lists is present, of its size and sha256."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    verify_files(directory, manifest["files"], directory / MANIFEST, "re-export the bundle")
    refuse_unlisted(directory, manifest["files"])
    return manifest


def refuse_unlisted(directory: Path, files: dict) -> None:
    """One line for the first file a bundle's run would read or load that `files` does not list (so
    no sha256 vouches for it): a module folder added to modules/ by hand, an oos.json or timings.json."""
    for name in READ:
        if (directory / name).exists() and name not in files:
            raise RedkitError(f"{directory / name}: not listed in the bundle's {MANIFEST}; refusing to read it")
    folders = {parent.as_posix() for listed in files for parent in Path(listed).parents}
    for folder in LOADED:
        for path in sorted((directory / folder).rglob("*")):
            relative = path.relative_to(directory)
            if relative.as_posix() in files or (path.is_dir() and not path.is_symlink()):
                continue
            # Named at its outermost unlisted folder: modules/extra, not modules/extra/config.json.
            first = next(p for p in (*reversed(relative.parents[:-1]), relative) if p.as_posix() not in folders)
            raise RedkitError(f"{directory / first}: not listed in the bundle's {MANIFEST}; refusing to load it")


def verify_files(directory: Path, files: dict, listing: Path, remedy: str) -> None:
    """Every file of `files` ({relative path: {size, sha256}}, listed in `listing`) present in
    `directory`, of its size and sha256 (a bundle's, an expert directory's)."""
    for relative, entry in files.items():
        path = _inside(directory, relative, listing)
        if not isinstance(entry, dict):
            raise RedkitError(f"{listing}: file {relative!r} must map to {{size, sha256}}")
        if not path.is_file():
            raise RedkitError(f"{path}: listed in {listing.name} but missing; {remedy}")
        if path.stat().st_size != entry.get("size") or file_digest(path) != entry.get("sha256"):
            what = "size" if path.stat().st_size != entry.get("size") else "sha256"
            raise RedkitError(f"{path}: {what} mismatch (altered or truncated); {remedy}")
