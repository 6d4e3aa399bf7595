"""A module file made smaller for the wire, exactly: an owner sends `compact(file)`, the server checks and stages
`expand(...)` of it, the same bytes (the manifest's sha256 says so before anything is loaded: assemble.check).

An owner's contribution is mostly one matrix: each domain's within-class scatter of φ (2,048 × 2,048 float64,
33.6 MB of a CLINC150 owner's 34.7; 4,096 wide, 134 MB, for tuned owners). A scatter is symmetric but for a few
entries one grid step off their mirror (the summing order of a matrix product: scatter_share.py), so it travels as
its upper triangle and those few entries. Every tensor's bytes are then laid out by their place in a value (all
first bytes, then all second bytes, ...: the sign-and-exponent bytes of neighbouring values are alike and deflate
finds them; the low mantissa bytes are noise and stay as they are) and the whole is deflated (zlib). On CLINC150 a
scatter goes from 33.6 MB to about 10 MB, with no bit changed.

    compact(data) -> bytes       a safetensors file -> MAGIC + deflated payload (itself a safetensors file: the
                                 original header, then per tensor its byte planes, of its upper triangle and the
                                 entries below it that differ from their mirror where it is square and symmetric
                                 but for at most 1 % of them); a file with no such tensor is sent as it is
    expand(data, size, where)    back to the file's bytes; data not starting with MAGIC is returned as it is. Only
                                 `size` (the manifest's) bytes, plus a margin for the payload's own header, are ever
                                 inflated: a small body that would inflate to gigabytes is refused in one line

numpy and safetensors only (no torch): the server's upload path and the push (upload.py) import it.
"""

import json
import zlib

import numpy as np
import safetensors.numpy
from safetensors import SafetensorError

from redkit.errors import RedkitError

MAGIC = b"RKZ\x00compact1"  # read as a safetensors header length this is about 2^63 bytes: no such file starts so
LEVEL = 6  # zlib: 1.1-1.3 s for a 2,048-wide scatter on one core, 10.1 MB (level 1: 0.7 s, 10.3 MB)
ASYMMETRIC = 0.01  # a square tensor with at most this share of its lower entries off their mirror is sent as a triangle
# numpy's little-endian dtype of each safetensors dtype a module file holds (others travel as raw bytes)
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "BF16": "<u2"}
HEADER = "header"  # the payload's tensor holding the original file's first 8 + N bytes (length and JSON header)


def compact(data: bytes) -> bytes:
    """The smaller form of the safetensors file `data`, or `data` itself where no tensor is a symmetric matrix (or
    it is no safetensors file that `expand` could give back exactly)."""
    header, body = _split(data)
    if header is None:
        return data
    try:
        return _compacted(header, body, data[: len(data) - len(body)]) or data
    except (KeyError, TypeError, ValueError):  # a tensor whose shape, type and bytes do not agree
        return data


def expand(data: bytes, size: int, where: str) -> bytes:
    """The file of `size` bytes that `compact` gave `data`; `data` itself if it was sent as it is. One line naming
    `where` if it is not a compact file, inflates past `size` (and the margin), or does not fill exactly `size`."""
    if not data.startswith(MAGIC):
        return data
    bound = size + size // 50 + 2**16  # the payload: the file's bytes, the few entries' positions, its own header
    try:
        inflater = zlib.decompressobj()
        payload = inflater.decompress(data[len(MAGIC) :], bound)
        if inflater.unconsumed_tail:
            raise RedkitError(f"{where}: inflates past the {size:,} bytes its manifest gives")
        if not inflater.eof:
            raise RedkitError(f"{where}: its compact form is cut short")
        tensors = safetensors.numpy.load(payload)
        head = tensors.pop(HEADER).tobytes()
        header, _ = _split(head, whole=False)
        if header is None or len(head) > size:
            raise RedkitError(f"{where}: its compact form has no safetensors header")
        out = bytearray(size)
        out[: len(head)] = head
        for name, entry in _tensors(header):
            begin, end = (len(head) + offset for offset in entry["data_offsets"])
            if not len(head) <= begin <= end <= size:
                raise RedkitError(f"{where}: tensor {name!r} lies outside the {size:,} bytes its manifest gives")
            out[begin:end] = _restored(tensors, name, entry, end - begin)
        return bytes(out)
    except RedkitError:
        raise
    except (zlib.error, SafetensorError, ValueError, KeyError, TypeError, IndexError) as err:
        raise RedkitError(f"{where}: not a compact module file ({type(err).__name__}: {err})") from None


# ---- the pieces ----------------------------------------------------------------------------------------------


def _compacted(header: dict, body: memoryview, head: bytes) -> bytes | None:
    """MAGIC + the deflated payload of a safetensors file (its `head`: length and JSON header; `body`: its tensors'
    bytes), or None if no tensor of it is a symmetric matrix (found before any byte plane is made: a tuned owner's
    top layers alone are 14 MB of planes that would be thrown away)."""
    tensors = []  # (name, its values or its raw bytes, its triangle or None), in the header's order
    for name, entry in _tensors(header):
        raw = body[entry["data_offsets"][0] : entry["data_offsets"][1]]
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            tensors.append((name, np.frombuffer(raw, np.uint8), None))
            continue
        values = np.frombuffer(raw, dtype).reshape(entry["shape"])
        tensors.append((name, values, _triangle(values)))
    if all(triangle is None for _, _, triangle in tensors):
        return None
    payload = {HEADER: np.frombuffer(head, np.uint8)}
    for name, values, triangle in tensors:
        if triangle is not None:
            upper, below_at, below = triangle
            payload[f"upper/{name}"], payload[f"below/{name}"] = _planes(upper), _planes(below)
            payload[f"below_at/{name}"] = below_at
        elif DTYPES.get(header[name]["dtype"]) is None:
            payload[f"raw/{name}"] = values
        else:
            payload[f"planes/{name}"] = _planes(values.reshape(-1))
    return MAGIC + zlib.compress(safetensors.numpy.save(payload), LEVEL)


def _split(data: bytes, whole: bool = True) -> tuple[dict | None, memoryview]:
    """(the JSON header, the tensors' bytes) of a safetensors file; (None, ...) if it is not one whose tensors lie
    end to end from the start of its data (`whole`: to its end), the layout `compact` can give back exactly."""
    if len(data) < 8:
        return None, memoryview(b"")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        return None, memoryview(b"")
    body, edge = memoryview(data)[8 + n :], 0
    try:
        header = json.loads(data[8 : 8 + n])
        for begin, end in sorted(tuple(entry["data_offsets"]) for _, entry in _tensors(header)):
            if begin != edge or end < begin:
                return None, body
            edge = end
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return None, body
    return (header if edge == len(body) or not whole else None), body


def _tensors(header: dict):
    """(name, entry) of every tensor of a safetensors header (its "__metadata__" apart)."""
    return ((name, entry) for name, entry in header.items() if name != "__metadata__")


def _planes(values: np.ndarray) -> np.ndarray:
    """(n,) values -> (itemsize, n) uint8: row b holds byte b of every value."""
    return np.ascontiguousarray(values.view(np.uint8).reshape(-1, values.dtype.itemsize).T)


def _from_planes(planes: np.ndarray, dtype: str) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    if planes.dtype != np.uint8 or planes.ndim != 2 or planes.shape[0] != itemsize:
        raise ValueError(f"byte planes of shape {planes.shape}, not ({itemsize}, n)")
    return np.ascontiguousarray(planes.T).view(dtype).reshape(-1)


def _triangle(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(its upper triangle row by row (M(M+1)/2,), the flat positions i·M + j of the entries below the diagonal that
    differ from their mirror, those entries) of a square matrix symmetric but for at most ASYMMETRIC of them; else
    None. Compared bit for bit (-0.0 is not 0.0, a NaN is itself)."""
    if values.ndim != 2 or values.shape[0] != values.shape[1] or values.shape[0] < 2:
        return None
    width = values.shape[0]
    bits = values.view(f"<u{values.dtype.itemsize}")
    below_at = np.flatnonzero(np.tril(bits != bits.T, -1))  # (M, M) bool: 16.8 MB at M = 4,096
    if len(below_at) > ASYMMETRIC * width * (width - 1) / 2:
        return None
    return values[_upper(width)], below_at.astype(np.int64), values.reshape(-1)[below_at]


def _upper(width: int) -> np.ndarray:
    """(M, M) bool: the diagonal and above; indexing with it reads them row by row."""
    return np.triu(np.ones((width, width), dtype=bool))


def _restored(tensors: dict, name: str, entry: dict, length: int) -> bytes:
    """A tensor's `length` bytes from its pieces in the payload (the length checked before anything is made)."""
    dtype = DTYPES.get(entry["dtype"])
    if dtype is None:
        piece = tensors[f"raw/{name}"].tobytes()
    elif f"planes/{name}" in tensors:
        piece = _from_planes(tensors[f"planes/{name}"], dtype).tobytes()
    else:
        piece = _matrix(tensors, name, entry["shape"], dtype, length).tobytes()
    if len(piece) != length:
        raise ValueError(f"tensor {name!r}: {len(piece):,} bytes for a place of {length:,}")
    return piece


def _matrix(tensors: dict, name: str, shape: list, dtype: str, length: int) -> np.ndarray:
    """A square tensor from its upper triangle and the entries below it that differ from their mirror."""
    width = shape[0] if len(shape) == 2 and shape[0] == shape[1] and isinstance(shape[0], int) else 0
    if width < 2 or width * width * np.dtype(dtype).itemsize != length:
        raise ValueError(f"tensor {name!r} of shape {shape} sent as a triangle of a {length:,}-byte place")
    upper = _from_planes(tensors[f"upper/{name}"], dtype)
    below, below_at = _from_planes(tensors[f"below/{name}"], dtype), tensors[f"below_at/{name}"]
    if len(upper) != width * (width + 1) // 2 or below_at.dtype != np.int64 or below_at.shape != below.shape:
        raise ValueError(f"tensor {name!r}: its triangle does not match its shape {shape}")
    if len(below_at) and (below_at.min() < 0 or below_at.max() >= width * width):
        raise ValueError(f"tensor {name!r}: an entry outside its matrix")
    matrix, upper_mask = np.empty((width, width), dtype), _upper(width)
    matrix[upper_mask] = upper
    matrix.T[upper_mask] = upper  # the mirror (the transpose's upper triangle, row by row), then the entries that
    # differ from it
    matrix.reshape(-1)[below_at] = below
    return matrix
