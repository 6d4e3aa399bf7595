"""A bundle's `manifest.json`: what the bundle holds and the proof that it is intact.

    {"format": 1, "redkit_version": "0.1.0", "kind": "task1", "heads": false,
     "files": {"modules/router/model.safetensors": {"size": 134412, "sha256": "..."}, ...},
     "backbone": {...}, "test_metrics": {...}, "source": {"run": "/abs/run", "git_commit": "..."}}

Opening a bundle verifies every listed file (present, same size, same sha256) before anything is
loaded: a bundle is shipped to other machines, and a file altered or cut short in transit would
otherwise load as silently wrong weights. Files the manifest does not list are ignored (never
loaded: only listed modules are part of the bundle). A bundle whose format is newer than this
redkit reads is refused with the versions involved, since its layout may mean something else.
"""

import hashlib
from importlib import metadata
from pathlib import Path

from redkit.errors import RedkitError
from redkit.jsonfile import read_json

MANIFEST = "manifest.json"
FORMAT = 1  # the bundle layout this redkit writes and the newest it reads


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
        raise RedkitError(f"{directory}: written by redkit {manifest.get('redkit_version', '?')} with bundle format {fmt}; "
                          f"this redkit {redkit_version()} reads up to {FORMAT}; upgrade redkit")
    if not isinstance(files, dict) or not all(isinstance(e, dict) for e in files.values()):
        raise RedkitError(f"{path}: field 'files' must map each relative path to {{size, sha256}}")
    return manifest


def _inside(directory: Path, relative: str, listing: Path) -> Path:
    """`directory/relative`, refusing a listed path that escapes the directory (absolute, '..')."""
    if not relative.isprintable():  # "\r" or "\n" in a name would also break the one-line error below
        raise RedkitError(f"{listing}: file path {relative!r} is not a printable file name")
    path = directory / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts or not relative:
        raise RedkitError(f"{listing}: file path {relative!r} leaves {directory.name}")
    return path


def verify_bundle(directory: str | Path) -> dict:
    """The manifest, after checking that every file it lists is present, of its size and sha256."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    verify_files(directory, manifest["files"], directory / MANIFEST, "re-export the bundle")
    return manifest


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
