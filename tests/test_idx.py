import gzip
import struct

import numpy as np
import pytest

from redkit.errors import RedkitError
from redkit_experiments.digits.idx import load_digits_dataset, load_mnist, read_idx


def idx_bytes(array: np.ndarray, type_code: int = 0x08) -> bytes:
    header = bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path, array, gz=False, type_code=0x08):
    data = idx_bytes(array, type_code)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def images():
    return np.random.default_rng(0).integers(0, 256, size=(7, 28, 28), dtype=np.uint8)


@pytest.mark.parametrize("gz", [False, True])
def test_round_trip_raw_and_gzipped(tmp_path, images, gz):
    labels = np.arange(7, dtype=np.uint8)
    # the gzipped file keeps a plain name: detection is by magic bytes, not by suffix
    got_images = read_idx(write_idx(tmp_path / "images", images, gz))
    got_labels = read_idx(write_idx(tmp_path / "labels", labels, gz))
    assert got_images.dtype == np.uint8 and got_images.shape == (7, 28, 28)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)


def test_other_idx_types_are_native_endian(tmp_path):
    values = np.array([[1.5, -2.0], [3.25, 1e6]], dtype=np.float32)
    got = read_idx(write_idx(tmp_path / "floats", values, type_code=0x0D))
    assert got.dtype == np.float32 and got.dtype.isnative
    np.testing.assert_array_equal(got, values)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_file_names_the_file(tmp_path, images, gz):
    data = idx_bytes(images)[:-100]
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(RedkitError, match="truncated") as err:
        read_idx(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_truncated_gzip_stream(tmp_path, images):
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(idx_bytes(images))[:-50])
    with pytest.raises(RedkitError, match="images.gz"):
        read_idx(path)


def test_trailing_bytes_rejected(tmp_path, images):
    path = tmp_path / "images"
    path.write_bytes(idx_bytes(images) + b"\x00")
    with pytest.raises(RedkitError, match="trailing"):
        read_idx(path)


def test_wrong_magic(tmp_path, images):
    path = tmp_path / "images"
    path.write_bytes(b"\x12\x34" + idx_bytes(images)[2:])
    with pytest.raises(RedkitError, match="magic number 0x12340803") as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_labels_where_images_expected(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros(3, dtype=np.uint8))  # a labels file
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(3, dtype=np.uint8))
    with pytest.raises(RedkitError, match="train-images-idx3-ubyte: wrong IDX magic number 0x00000801"):
        load_mnist(tmp_path)


def make_mnist(tmp_path, n_train=5, n_test=3, gz=True):
    rng = np.random.default_rng(1)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        suffix = ".gz" if gz else ""
        write_idx(
            tmp_path / f"{prefix}-images-idx3-ubyte{suffix}", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), gz
        )
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte{suffix}", rng.integers(0, 10, n, dtype=np.uint8), gz)


def test_load_mnist_shapes_and_scaling(tmp_path):
    make_mnist(tmp_path)
    x_train, y_train, x_test, y_test = load_mnist(tmp_path)
    assert x_train.shape == (5, 784) and x_test.shape == (3, 784)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int64
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    raw = read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    np.testing.assert_allclose(x_train[2], raw[2].reshape(-1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y_test, read_idx(tmp_path / "t10k-labels-idx1-ubyte.gz"))


def test_load_mnist_names_the_missing_file(tmp_path):
    make_mnist(tmp_path, gz=False)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(RedkitError, match="t10k-labels-idx1-ubyte"):
        load_mnist(tmp_path)


def test_load_mnist_count_mismatch(tmp_path):
    make_mnist(tmp_path, gz=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4, dtype=np.uint8))
    with pytest.raises(RedkitError, match="5 images but train-labels-idx1-ubyte has 4 labels"):
        load_mnist(tmp_path)


def test_load_mnist_missing_directory(tmp_path):
    with pytest.raises(RedkitError, match="nowhere"):
        load_mnist(tmp_path / "nowhere")


def test_digits_split_is_seeded_stratified_and_scaled():
    x_train, y_train, x_test, y_test = load_digits_dataset(test_fraction=0.25, seed=3)
    assert x_train.shape[1] == 64 and len(x_train) + len(x_test) == 1797
    assert x_train.dtype == np.float32 and y_train.dtype == np.int64
    assert x_train.min() == 0.0 and x_train.max() == 1.0
    assert set(np.unique(y_test)) == set(range(10))
    again = load_digits_dataset(test_fraction=0.25, seed=3)
    np.testing.assert_array_equal(again[3], y_test)
    other = load_digits_dataset(test_fraction=0.25, seed=4)
    assert not np.array_equal(other[3], y_test)
