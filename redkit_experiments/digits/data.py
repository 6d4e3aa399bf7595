"""The digits benchmark's data: images from scikit-learn's 8x8 digits or MNIST, five label-pair
domains, and honest splits fixed once per run in `splits.json`.

    domains   d01 = {0, 1}, d23 = {2, 3}, d45 = {4, 5}, d67 = {6, 7}, d89 = {8, 9}: expert i sees only
              the digits of pair i, and the router's target is the pair
    test      the source's test images (MNIST's 10k; a stratified `test_ratio` of sklearn's 1,797)
    val       a stratified `val_ratio` of the source's training images (early stopping, never trained on)
    train     the rest; `base` is a stratified `base_ratio` of it, stage base's only data

Every index in `splits.json` points into the source array its split is drawn from ("from": "train"
or "test"), and the file records a hash of each source array: if the files under `--data_dir`
change after the split was made, the run refuses to go on instead of silently mixing data.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from redkit.errors import RedkitError
from redkit.space import LabelSpace
from redkit_experiments.digits.idx import load_digits_dataset, load_mnist

DIGIT_PAIRS = LabelSpace(
    num_classes=10, domains=("d01", "d23", "d45", "d67", "d89"), class_domains=tuple(digit // 2 for digit in range(10))
)
DOMAIN_OF_CLASS = tuple(DIGIT_PAIRS.domains[digit // 2] for digit in range(10))  # class -> domain name
SPLIT_NAMES = ("train", "val", "test")


def domain_labels(y: torch.Tensor) -> torch.Tensor:
    """Digits (N,) -> their pair's domain label 0..4 (N,)."""
    return y // 2


def array_hash(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(str((array.dtype.str, array.shape)).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


@dataclass
class Source:
    """The images and labels a run's splits index into: x (N, P) float32 in [0, 1], y (N,) int64."""

    name: str  # "sklearn-digits" or "mnist"
    arrays: dict[str, tuple[np.ndarray, np.ndarray]]  # "train" / "test" -> (x, y)
    image_shape: tuple[int, int]

    @property
    def pixels(self) -> int:
        return self.arrays["train"][0].shape[1]

    def hashes(self) -> dict[str, str]:
        return {part: array_hash(x, y) for part, (x, y) in self.arrays.items()}


def load_source(data_dir: str | None, test_ratio: float, seed: int) -> Source:
    if data_dir is None:
        x_train, y_train, x_test, y_test = load_digits_dataset(test_fraction=test_ratio, seed=seed)
        return Source("sklearn-digits", {"train": (x_train, y_train), "test": (x_test, y_test)}, (8, 8))
    x_train, y_train, x_test, y_test = load_mnist(Path(data_dir))
    for part, y in (("train", y_train), ("test", y_test)):
        if len(y) and (y.min() < 0 or y.max() > 9):
            raise RedkitError(f"{data_dir}: {part} labels must be digits 0..9, found {int(y.min())}..{int(y.max())}")
    return Source("mnist", {"train": (x_train, y_train), "test": (x_test, y_test)}, (28, 28))


def stratified_sample(labels: np.ndarray, ratio: float, rng: np.random.Generator, leave: int = 0) -> np.ndarray:
    """Sorted positions of `ratio` of each class (rounded, at least one), leaving at least `leave`
    of every class out, so that tiny data still gives every domain both training and validation rows."""
    chosen = []
    for digit in np.unique(labels):
        pool = np.flatnonzero(labels == digit)
        k = min(max(round(ratio * len(pool)), 1), len(pool) - leave)
        chosen.append(rng.permutation(pool)[: max(k, 0)])
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)


def _describe(source_part: str, indices: np.ndarray, y: np.ndarray) -> dict:
    digits = y[indices]
    domains = np.asarray(DOMAIN_OF_CLASS)[digits]
    return {
        "from": source_part,
        "count": int(len(indices)),
        "per_domain": {name: int((domains == name).sum()) for name in DIGIT_PAIRS.domains},
        "per_class": {str(d): int((digits == d).sum()) for d in range(10)},
        "indices": indices.tolist(),
    }


def make_splits(source: Source, val_ratio: float, base_ratio: float, seed: int) -> dict:
    """The content of `splits.json`: source description, and per split its indices and counts."""
    rng = np.random.default_rng(seed)
    _, y_train = source.arrays["train"]
    _, y_test = source.arrays["test"]
    val = stratified_sample(y_train, val_ratio, rng, leave=1)
    train = np.setdiff1d(np.arange(len(y_train)), val)
    base = train[stratified_sample(y_train[train], base_ratio, rng)]
    return {
        "source": {
            "name": source.name,
            "image_shape": list(source.image_shape),
            "sizes": {part: int(len(y)) for part, (_, y) in source.arrays.items()},
            "hashes": source.hashes(),
        },
        "seed": seed,
        "val_ratio": val_ratio,
        "base_ratio": base_ratio,
        "domains": {name: [d for d in range(10) if DOMAIN_OF_CLASS[d] == name] for name in DIGIT_PAIRS.domains},
        "splits": {
            "train": _describe("train", train, y_train),
            "val": _describe("train", val, y_train),
            "test": _describe("test", np.arange(len(y_test)), y_test),
            "base": _describe("train", base, y_train),
        },
    }
