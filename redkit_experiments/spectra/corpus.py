"""The three-domain corpus of `redkit reproduce spectra`: every token's domain is known.

    code    the Python standard library's top-level sources on this machine (sysconfig's stdlib
            directory, `*.py`, sorted by name); every 5th file is held out, the rest train; files
            are read in a seeded shuffled order, the first `code_file_bytes` characters of each, up
            to the byte cap (the files used are recorded)
    math    redkit's Task 2 generator (2-4 operands, + and -) rendered "Q: <question> A: <answer>";
            held out: its structure-disjoint test split (no operand/operator sequence of it is trained on)
    prose   CLINC150's crowd-sourced English queries (data/clinc150/data_full.json by default,
            read in place, never copied): its train split trains, its test split is held out; both
            are grouped by intent in the file, so the queries are shuffled (seed 0) before the cap

Tokenizer: bytes (vocabulary 256, UTF-8), nothing to train or ship; recorded in the results. Each
domain is one byte stream per split, each capped at `train_bytes` / `heldout_bytes` (in file / example
order, so the cut is deterministic); sizes and the code files used are recorded.
"""

import json
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from redkit.data.clinc150 import DEFAULT_DIR
from redkit.errors import RedkitError

DOMAINS = ("code", "math", "prose")
VOCAB = 256  # bytes
CLINC = DEFAULT_DIR / "data_full.json"


@dataclass
class CorpusConfig:
    train_bytes: int = 400_000  # per domain
    heldout_bytes: int = 40_000  # per domain
    math_examples: int = 12_000  # drawn by the Task 2 generator (train + val + test)
    clinc_path: str = ""  # "" = data/clinc150/data_full.json (redkit.data.clinc150.DEFAULT_DIR)
    code_dir: str = ""  # "" = this interpreter's standard library
    code_file_bytes: int = 4_000  # at most this much of each file, so that many files make up the cap


@dataclass
class Corpus:
    train: dict[str, torch.Tensor]  # domain -> (bytes,) uint8 stream
    heldout: dict[str, torch.Tensor]
    sources: dict  # what was read: files, sizes, splits

    def summary(self) -> dict:
        return {
            "tokenizer": "bytes (UTF-8), vocabulary 256",
            "domains": list(DOMAINS),
            "train_bytes": {d: len(t) for d, t in self.train.items()},
            "heldout_bytes": {d: len(t) for d, t in self.heldout.items()},
            "sources": self.sources,
        }


def _stream(texts, cap: int) -> torch.Tensor:
    data = bytearray()
    for text in texts:
        if len(data) >= cap:
            break
        data += text.encode("utf-8") + b"\n"
    return torch.frombuffer(bytearray(data[:cap]), dtype=torch.uint8).clone()


def code_texts(config: CorpusConfig) -> tuple[list[str], list[str], dict]:
    root = Path(config.code_dir or sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    if len(files) < 5:
        raise RedkitError(f"{root}: fewer than 5 Python files, no code domain to build")
    train, held = (
        _shuffled([f for i, f in enumerate(files) if i % 5 != 4]),
        _shuffled([f for i, f in enumerate(files) if i % 5 == 4]),
    )
    cut = config.code_file_bytes
    train, held = _up_to(train, config.train_bytes, cut), _up_to(held, config.heldout_bytes, cut)
    read = lambda fs: [f.read_text(encoding="utf-8", errors="replace")[:cut] for f in fs]  # noqa: E731
    return (
        read(train),
        read(held),
        {
            "directory": str(root),
            "train_files": {f.name: f.stat().st_size for f in train},
            "heldout_files": {f.name: f.stat().st_size for f in held},
        },
    )


def _shuffled(items: list) -> list:
    items = list(items)
    random.Random(0).shuffle(items)
    return items


def _up_to(files: list[Path], cap: int, per_file: int) -> list[Path]:
    """The first files whose sizes (each at most `per_file`) reach `cap` bytes."""
    out, total = [], 0
    for f in files:
        if total >= cap:
            break
        out.append(f)
        total += min(f.stat().st_size, per_file)
    return out


def math_texts(config: CorpusConfig) -> tuple[list[str], list[str], dict]:
    from redkit_experiments.arithmetic.generate import DataConfig, generate

    data = DataConfig(task="task2", n=config.math_examples, seed=0, split="structure")
    splits = generate(data)
    render = lambda examples: [f"Q: {ex.question} A: {ex.answer}" for ex in examples]  # noqa: E731
    return (
        render(splits["train"]),
        render(splits["test"]),
        {
            "generator": "redkit task2 (2-4 operands, + and -), structure split, seed 0",
            "examples": {"train": len(splits["train"]), "heldout": len(splits["test"])},
        },
    )


def clinc_file(config: CorpusConfig) -> Path:
    path = Path(config.clinc_path) if config.clinc_path else CLINC
    if not path.is_file():
        raise RedkitError(f"{path}: CLINC150's data_full.json not found (pass its path as --clinc)")
    return path


def prose_texts(config: CorpusConfig) -> tuple[list[str], list[str], dict]:
    path = clinc_file(config)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        train, held = _shuffled(row[0] for row in data["train"]), _shuffled(row[0] for row in data["test"])
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise RedkitError(f"{path}: not CLINC150's data_full.json ({type(err).__name__}: {err})") from None
    return (
        train,
        held,
        {
            "file": str(path),
            "splits": "train (trains), test (held out)",
            "queries": {"train": len(train), "heldout": len(held)},
        },
    )


def build_corpus(config: CorpusConfig) -> Corpus:
    clinc_file(config)  # a missing file fails before any work
    train, heldout, sources = {}, {}, {}
    for domain, read in zip(DOMAINS, (code_texts, math_texts, prose_texts)):
        tr, he, source = read(config)
        train[domain], heldout[domain] = _stream(tr, config.train_bytes), _stream(he, config.heldout_bytes)
        sources[domain] = source
    return Corpus(train, heldout, sources)


def train_batch(
    corpus: Corpus, batch: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) token ids at random offsets, domains in turn (B/3 each when B is a multiple of 3),
    and (B,) their domain index. The same generator state gives the same batch."""
    domains = torch.arange(batch) % len(DOMAINS)
    rows = []
    for d in domains.tolist():
        stream = corpus.train[DOMAINS[d]]
        start = int(torch.randint(0, len(stream) - length, (1,), generator=generator))
        rows.append(stream[start : start + length])
    return torch.stack(rows).long(), domains


def heldout_batches(corpus: Corpus, length: int, sequences: int) -> list[tuple[torch.Tensor, int]]:
    """Per domain, its first `sequences` non-overlapping (1, T) windows of held-out text: [(ids (S, T), domain)]."""
    out = []
    for d, domain in enumerate(DOMAINS):
        stream = corpus.heldout[domain]
        count = min(sequences, len(stream) // length)
        if count == 0:
            raise RedkitError(f"held-out {domain} text has {len(stream)} bytes, fewer than one sequence of {length}")
        out.append((stream[: count * length].reshape(count, length).long(), d))
    return out
