"""An owner's contribution as one upload: a tar of its files (contribution.json and its module files), sent to a
running `redkit serve` (POST /v1/domains?owner=NAME, Content-Type application/x-tar, the admin token), which
checks it exactly as the federation's server does (assemble.check) and swaps in the model assembled with it.

    pack(received)      {relative path: bytes} -> tar bytes (sorted, fixed metadata: the same files, the same tar)
    unpack(body, where) tar bytes -> {relative path: bytes}; a member that is not a regular file, or twice, refused
    package(directory)  what leaves an owner: its manifest and the module files it lists
    push(url, owner, directory, token)   the accepted contribution in `directory` to a running server

Only the standard library: the server's side imports it without Flower, the push without torch.
"""

import io
import json
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from redkit.errors import RedkitError

CONTENT_TYPE = "application/x-tar"
SIZE_LIMIT = 256 * 2**20  # bytes a contribution may have (a CLINC150 domain's is about 36 MB, its statistics 34)
MANIFEST = "contribution.json"  # a contribution's manifest (owner.py writes it)


def pack(received: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative in sorted(received):
            info = tarfile.TarInfo(relative)
            info.size, info.mode, info.mtime = len(received[relative]), 0o644, 0
            tar.addfile(info, io.BytesIO(received[relative]))
    return buffer.getvalue()


def unpack(body: bytes, where: str) -> dict[str, bytes]:
    """The files of a tar body, read in memory (nothing is extracted: the names are checked by assemble.check
    before anything is written)."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
            for member in tar:
                if member.isdir():
                    continue
                if not member.isfile():
                    raise RedkitError(f"{where}: member {member.name!r} is not a regular file")
                if member.name in files:
                    raise RedkitError(f"{where}: member {member.name!r} twice")
                files[member.name] = tar.extractfile(member).read()
    except tarfile.TarError as err:
        raise RedkitError(f"{where}: not a tar archive ({err})") from None
    return files


def package(directory: Path, manifest: dict | None = None) -> dict[str, bytes]:
    """What leaves an owner: {relative path: bytes} of every module file its manifest lists, and the manifest
    (read from `directory` when not given): an owner's work directory, or a contribution accepted from it."""
    directory = Path(directory)
    manifest = manifest if manifest is not None else json.loads((directory / MANIFEST).read_bytes())
    missing = [rel for rel in manifest["files"] if not (directory / rel).is_file()]
    if missing:
        raise RedkitError(
            f"{directory}: {missing[0]} is listed in {MANIFEST} but missing; train the contribution again"
        )
    return {rel: (directory / rel).read_bytes() for rel in manifest["files"]} | {
        MANIFEST: (directory / MANIFEST).read_bytes()
    }


def push(url: str, owner: str, directory: Path, token: str, timeout: float = 600.0) -> dict:
    """POST the contribution in `directory` to the server at `url`; the server's answer (the model it now serves)."""
    body = pack(package(directory))
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/domains?{urllib.parse.urlencode({'owner': owner})}",
        data=body,
        method="POST",
        headers={"Content-Type": CONTENT_TYPE, "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        try:
            why = json.loads(err.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            why = err.reason
        raise RedkitError(f"{url}: owner {owner!r} refused ({err.code}): {why}") from None
    except urllib.error.URLError as err:
        raise RedkitError(f"{url}: not reachable ({err.reason})") from None
