"""MNIST from its IDX files, and sklearn's 8x8 digits as an offline stand-in with the same contract.

IDX (the format MNIST ships in): a 4-byte big-endian magic number `00 00 <type> <ndim>`, then ndim
big-endian uint32 dimensions, then the data in C order. MNIST images are magic 0x00000803 (uint8,
3-D: N x 28 x 28), labels 0x00000801 (uint8, 1-D: N). Files are often kept gzipped; we detect that
by the gzip magic bytes 1f 8b rather than by the file name, because downloads get renamed.

A half-downloaded or mislabelled file is the usual way this goes wrong, so every check raises a
one-line `RedkitError` naming the file and what is wrong, instead of a reshape error later.
"""

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from redkit.errors import RedkitError

GZIP_MAGIC = b"\x1f\x8b"
# IDX type byte -> element dtype (big-endian where it matters)
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801

MNIST_FILES = {  # split -> (images file, labels file), without the optional ".gz"
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise RedkitError(f"{path}: cannot read IDX file ({err.strerror or err})") from None
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as err:
        raise RedkitError(f"{path}: corrupt or truncated gzip data ({err})") from None


def read_idx(path: str | Path, expect_magic: int | None = None) -> np.ndarray:
    """Read one IDX file (raw or gzipped) into an array of the header's shape and native dtype.

    `expect_magic` (e.g. IMAGES_MAGIC) additionally insists on one exact type and rank."""
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise RedkitError(f"{path}: truncated IDX file: {len(raw)} bytes, shorter than the 4-byte magic number")
    magic = int.from_bytes(raw[:4], "big")
    type_code, ndim = raw[2], raw[3]
    if raw[:2] != b"\x00\x00" or type_code not in IDX_DTYPES or ndim == 0:
        raise RedkitError(
            f"{path}: not an IDX file: magic number 0x{magic:08x} (expected 0x{IMAGES_MAGIC:08x} for "
            f"images, 0x{LABELS_MAGIC:08x} for labels)"
        )
    if expect_magic is not None and magic != expect_magic:
        raise RedkitError(f"{path}: wrong IDX magic number 0x{magic:08x}, expected 0x{expect_magic:08x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise RedkitError(
            f"{path}: truncated IDX file: header of {ndim} dimensions needs {header} bytes, file has {len(raw)}"
        )
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(IDX_DTYPES[type_code])
    expected, actual = math.prod(shape) * dtype.itemsize, len(raw) - header
    if actual != expected:
        what = "truncated IDX file" if actual < expected else "IDX file has trailing bytes"
        raise RedkitError(f"{path}: {what}: header says shape {shape} ({expected} data bytes), file has {actual}")
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))  # a native-endian, writable copy


def _find(data_dir: Path, name: str) -> Path:
    for candidate in (data_dir / name, data_dir / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise RedkitError(
        f"MNIST file not found: {data_dir / name} (or {name}.gz); put the four standard MNIST IDX files in {data_dir}"
    )


def _load_split(data_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    images_name, labels_name = MNIST_FILES[split]
    images_path, labels_path = _find(data_dir, images_name), _find(data_dir, labels_name)
    images = read_idx(images_path, expect_magic=IMAGES_MAGIC)  # (N, 28, 28) uint8
    labels = read_idx(labels_path, expect_magic=LABELS_MAGIC)  # (N,) uint8
    if len(images) != len(labels):
        raise RedkitError(f"{images_path}: {len(images)} images but {labels_path.name} has {len(labels)} labels")
    x = images.reshape(len(images), -1).astype(np.float32) / 255.0  # (N, 784) in [0, 1]
    return x, labels.astype(np.int64)


def load_mnist(data_dir: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train (60000, 784) float32 in [0, 1], y_train (60000,) int64, x_test, y_test) from the
    four standard IDX files in `data_dir`, each raw or with `.gz`."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise RedkitError(f"MNIST directory not found: {data_dir}")
    x_train, y_train = _load_split(data_dir, "train")
    x_test, y_test = _load_split(data_dir, "test")
    return x_train, y_train, x_test, y_test


def load_digits_dataset(
    test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sklearn's 8x8 digits (1,797 images, bundled with sklearn, so no download) in `load_mnist`'s
    shape of answer: (x_train (N, 64) float32 in [0, 1], y_train int64, x_test, y_test), split
    stratified by label with `seed`, so tests and laptop runs can stand in for MNIST."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise RedkitError(f"test_fraction must be between 0 and 1, not {test_fraction}")
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # (1797, 64); pixel values are 0..16
    y = digits.target.astype(np.int64)  # (1797,)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return x_train, y_train, x_test, y_test
