"""A module file's compact form for the wire (redkit/federated/compact.py): the same bytes back, smaller where a
tensor is a symmetric matrix, and whatever arrives in its place either expands within the size its manifest gives
or is refused in one line. Fast: numpy only."""

import random
import tracemalloc
import zlib

import numpy as np
import pytest
import safetensors.numpy

from redkit.errors import RedkitError
from redkit.federated.compact import MAGIC, compact, expand


def scatter(width: int, seed: int = 0) -> np.ndarray:
    """A within-class scatter as an owner's is: XᵀX of non-negative features, whole multiples of 2^-24."""
    x = np.maximum(np.random.default_rng(seed).standard_normal((3 * width, width)), 0)
    s = np.round((x.T @ x) * 2**24) / 2**24
    return (s + s.T) / 2  # symmetric exactly, as most of an owner's are


def file_of(**tensors) -> bytes:
    return safetensors.numpy.save(tensors, metadata={"format": "pt"})


def test_a_scatter_travels_as_its_triangle_and_comes_back_bit_for_bit():
    s = scatter(96)
    s[5, 2] = np.nextafter(s[2, 5], np.inf)  # one entry a step off its mirror, as a matrix product leaves some
    s[7, 1], s[1, 7] = -0.0, 0.0  # told apart bit for bit
    s[9, 3] = np.nan
    data = file_of(
        counts=np.arange(4.0),
        means=np.random.default_rng(1).standard_normal((4, 96)),
        scatter=s,
        rows=np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32),  # square, not symmetric
        mask=np.array([True, False, True]),
        ids=np.arange(5, dtype=np.int64),
    )
    sent = compact(data)
    assert sent.startswith(MAGIC) and len(sent) < 0.45 * len(data), (len(sent), len(data))
    assert expand(sent, len(data), "f") == data


def test_a_file_without_a_symmetric_matrix_is_sent_as_it_is():
    data = file_of(weight=np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32))
    assert compact(data) is data and expand(data, len(data), "f") is data
    assert compact(b"not a safetensors file") == b"not a safetensors file"


def test_a_small_body_that_would_inflate_past_its_size_is_refused_with_memory_bounded():
    bomb = MAGIC + zlib.compress(b"\0" * 200 * 2**20, 9)  # 200 MB of zeros in about 200 kB
    tracemalloc.start()
    with pytest.raises(RedkitError, match="file x: inflates past the 1,000 bytes its manifest gives"):
        expand(bomb, 1_000, "file x")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 * 2**20, peak


def test_a_compact_file_altered_anywhere_is_refused_in_one_line_or_expands_to_other_bytes():
    data = file_of(counts=np.arange(3.0), scatter=scatter(32))
    sent, rng = compact(data), random.Random(0)
    for cut in range(len(MAGIC), len(sent), max(1, len(sent) // 60)):
        with pytest.raises(RedkitError, match="^file x: "):
            expand(sent[:cut], len(data), "file x")
    for _ in range(300):  # anything but a RedkitError (a 4xx) fails the test; other bytes fail the sha256 later
        broken = bytearray(sent)
        at = rng.randrange(len(MAGIC), len(broken))
        broken[at] ^= 1 << rng.randrange(8)
        try:
            assert expand(bytes(broken), len(data), "file x") != data
        except RedkitError as err:
            assert str(err).startswith("file x: ") and "\n" not in str(err)
    with pytest.raises(RedkitError, match="not a compact module file"):
        expand(MAGIC + zlib.compress(b"\x10" + b"\0" * 7 + b"{}" * 8), 100, "file x")
    forged = MAGIC + zlib.compress(file_of(header=np.frombuffer(data[:100], np.uint8)))
    with pytest.raises(RedkitError, match="^file x: "):
        expand(forged, len(data), "file x")
