"""An owner's contribution as one upload: a tar of its files (contribution.json and its module files), sent to a
running `redkit serve` (POST /v1/domains?owner=NAME, Content-Type application/x-tar, the admin token), which
checks it exactly as the federation's server does (assemble.check) and swaps in the model assembled with it.

    pack(received)      {relative path: bytes} -> tar bytes (sorted, fixed metadata: the same files, the same tar)
    unpack(body, where, limit)   tar bytes -> {relative path: bytes}; whatever could cost the server memory or
                        time, or is not a plain file of a plain name, refused in one line (see `unpack`)
    package(directory)  what leaves an owner: its manifest and the module files it lists, each weights file in its
                        exact smaller form (compact.py: a scatter travels as its upper triangle, deflated)
    push(url, owner, directory, token)   the accepted contribution in `directory` to a running server

The standard library, numpy and safetensors (compact.py): the server's side imports it without Flower, the push
without torch.
"""

import io
import json
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from redkit.errors import RedkitError
from redkit.federated.compact import compact

CONTENT_TYPE = "application/x-tar"
SIZE_LIMIT = 256 * 2**20  # bytes a contribution may have, as sent and as its manifest gives them (a CLINC150
# domain's: about 36 MB, its scatter 34 of it; sent compact, about 12)
MANIFEST = "contribution.json"  # a contribution's manifest (owner.py writes it)
MAX_MEMBERS = 256  # pack writes 1 + 6 per domain (61 for CLINC150's 10); SIZE_LIMIT holds 7 of its domains
MAX_NAME = 256  # characters of a member's name; a module file's is at most 171 (a domain name has at most 128)
MAX_HEADER = 64 * 2**10  # bytes of a pax or GNU long-name header (pack writes ~100): tarfile reads one whole
MAX_CHAINED = 8  # such headers in a row before a member: tarfile reads each with one more level of recursion
PAX = (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE)  # a pax header of the next member
EXTENDED = (*PAX, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)  # headers that patch the member after them


def pack(received: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative in sorted(received):
            info = tarfile.TarInfo(relative)
            info.size, info.mode, info.mtime = len(received[relative]), 0o644, 0
            tar.addfile(info, io.BytesIO(received[relative]))
    return buffer.getvalue()


def unpack(body: bytes, where: str, limit: int = SIZE_LIMIT) -> dict[str, bytes]:
    """The files of a tar body, read in memory (nothing is extracted: the names are checked by assemble.check
    before anything is written). Refused in one line naming the member, before its data is read: a sparse member
    (GNU type 'S', or pax GNU.sparse.* records), a link, a device or fifo, a name too long, absolute, with '..' or
    NUL, a member twice, more than MAX_MEMBERS, members over `limit` bytes in all, an extended header over
    MAX_HEADER bytes, more than MAX_CHAINED in a row, or global (see _Header). The members are read one at a time
    (`for member in tar`), never listed first."""
    files: dict[str, bytes] = {}
    total = 0
    try:
        with _Archive.open(fileobj=io.BytesIO(body), mode="r:", where=where) as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise RedkitError(f"{where}: more than {MAX_MEMBERS} members")
                _refuse_member(member, where)
                if member.isdir():
                    continue
                if member.name in files:
                    raise RedkitError(f"{where}: member {_shown(member.name)} twice")
                total += member.size
                if total > limit:
                    raise RedkitError(f"{where}: members of over {limit:,} bytes in all (at {_shown(member.name)})")
                files[member.name] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError) as err:
        raise RedkitError(f"{where}: not a tar archive ({err})") from None
    return files


def _shown(name: str) -> str:
    """A member's name as a message quotes it: repr (control characters escaped), cut at 60 characters."""
    return repr(name[:60]) + ("..." if len(name) > 60 else "")


def _refuse_member(member: tarfile.TarInfo, where: str) -> None:
    """One line where `member` is not a regular file or directory under a plain relative name."""
    name, what = member.name, None  # a sparse one never gets here (_Header)
    if member.issym() or member.islnk():
        what = "is a link"
    elif member.ischr() or member.isblk() or member.isfifo():
        what = "is a device or fifo"
    elif not (member.isfile() or member.isdir()):
        what = "is not a regular file"
    elif member.size < 0:
        what = f"has a negative size ({member.size})"
    elif not name or len(name) > MAX_NAME:
        what = f"has a name of {len(name)} characters (1 to {MAX_NAME})"
    elif "\0" in name:
        what = "has a NUL in its name"
    elif name.startswith("/"):
        what = "has an absolute name"
    elif ".." in name.split("/"):
        what = "has '..' in its name"
    if what is not None:
        raise RedkitError(f"{where}: member {_shown(name)} {what}")


class _Header(tarfile.TarInfo):
    """tarfile's header, refusing what tarfile would otherwise read whole into memory, or recurse on, before it does.

    tarfile reads an extended header (pax, GNU long name) whole, then the next header recursively, and a sparse
    member's map (a GNU 'S' header's extension blocks, a pax 1.0 map at the start of its data) into a list of
    Python ints: about 20 bytes of memory per byte of body. `_proc_member` is where tarfile dispatches on a
    header's type, and the place its comment names for a subclass to override: the header's own block is parsed
    (type, size, name) and nothing after it is read yet."""

    def _proc_member(self, tar):
        where = tar.unpacking
        if self.type == tarfile.XGLTYPE:  # it would apply to every member after it; pack writes none
            raise RedkitError(f"{where}: member {_shown(self.name)} is a global pax header")
        if self.type in EXTENDED:
            tar.chained += 1
            if tar.chained > MAX_CHAINED:
                raise RedkitError(f"{where}: more than {MAX_CHAINED} extended headers in a row at {_shown(self.name)}")
            if self.size > MAX_HEADER:
                raise RedkitError(
                    f"{where}: extended header {_shown(self.name)} of {self.size:,} bytes (at most {MAX_HEADER:,})"
                )
            start = tar.fileobj.tell()  # what tarfile is about to read, read first (at most MAX_HEADER bytes)
            tar.sparse |= self.type in PAX and b"GNU.sparse." in tar.fileobj.read(self.size)
            tar.fileobj.seek(start)
        elif self.type == tarfile.GNUTYPE_SPARSE or tar.sparse:  # the map comes after this header: unread
            raise RedkitError(f"{where}: member {_shown(self.name)} is sparse")
        else:
            tar.chained = 0
        return super()._proc_member(tar)


class _Archive(tarfile.TarFile):
    """A tar read with _Header. Its state is set before tarfile reads the first header, which it does as it opens:
    `unpacking` (the upload, for messages), `chained` (extended headers in a row), `sparse` (one of them gave
    GNU.sparse.* records: the member they describe is sparse)."""

    def __init__(self, *args, where: str = "", **kwargs):
        self.unpacking, self.chained, self.sparse = where, 0, False
        super().__init__(*args, tarinfo=_Header, **kwargs)


def package(directory: Path, manifest: dict | None = None) -> dict[str, bytes]:
    """What leaves an owner: {relative path: bytes} of every module file its manifest lists (its weights in their
    compact form: assemble.check expands them), and the manifest (read from `directory` when not given): an owner's
    work directory, or a contribution accepted from it."""
    directory = Path(directory)
    manifest = manifest if manifest is not None else json.loads((directory / MANIFEST).read_bytes())
    missing = [rel for rel in manifest["files"] if not (directory / rel).is_file()]
    if missing:
        raise RedkitError(
            f"{directory}: {missing[0]} is listed in {MANIFEST} but missing; train the contribution again"
        )
    files = {rel: (directory / rel).read_bytes() for rel in manifest["files"]}
    return {rel: compact(data) if rel.endswith(".safetensors") else data for rel, data in files.items()} | {
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
