"""Balanced, split, written datasets for any registered text task.

Splits (docs/guides/design.md, decision 6):
- `structure` (default): every distinct operand/operator sequence belongs to exactly one split,
  chosen by a seeded hash of its key, so no test question's structure is ever seen in training.
- `random`: the paper's protocol; examples are drawn first and shuffled into splits, so the same
  structure (even the same question) can appear in train and test.

Each split holds exactly the same number of examples per answer band of the task (the ranges
R1..R5 unless the task says otherwise). A fourth file,
`test_heldout_templates.jsonl`, re-phrases every test expression with a held-out template.
"""

import hashlib
import random
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from redkit.atomic import write_json, write_jsonl
from redkit.errors import RedkitError
from redkit_experiments.arithmetic.expression import Expression
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.arithmetic.tasks import TASKS, TextTask
from redkit_experiments.arithmetic.vocabulary import NUM_DOMAINS, domain_of, in_vocabulary

SPLITS = ("train", "val", "test")
HELDOUT = "test_heldout_templates"
SPLIT_KINDS = ("structure", "random")


@dataclass
class DataConfig:
    task: str = "task1"
    n: int = 80_000  # train + val + test
    seed: int = 0
    split: str = "structure"  # structure | random
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)  # 64k / 8k / 8k of 80k

    def __post_init__(self):
        if self.split not in SPLIT_KINDS:
            raise RedkitError(f"unknown split {self.split!r} (expected one of {', '.join(SPLIT_KINDS)})")
        if self.n < 10 * NUM_DOMAINS:
            raise RedkitError(f"--n {self.n} is too small: at least {10 * NUM_DOMAINS} examples are needed")


def split_of(key: str, seed: int, fractions: tuple[float, ...]) -> str:
    """The split a structure belongs to: a seeded, stable hash of its key (not Python's hash())."""
    u = int.from_bytes(hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest(), "big") / 2**64
    edge = 0.0
    for name, fraction in zip(SPLITS, fractions):
        edge += fraction
        if u < edge:
            return name
    return SPLITS[-1]


def _per_band(total: int, bands: int) -> list[int]:
    """Split `total` into `bands` counts that differ by at most one."""
    return [total // bands + (i < total % bands) for i in range(bands)]


def _split_sizes(config: DataConfig) -> dict[str, int]:
    sizes = [round(config.n * f) for f in config.fractions]
    sizes[0] = config.n - sum(sizes[1:])
    return dict(zip(SPLITS, sizes))


def _draw(task: TextTask, rng: random.Random, band: int, want_split: str | None, config: DataConfig) -> Expression:
    """An expression of answer band `band`, belonging to `want_split` (None: any split)."""
    for _ in range(100_000):
        expr = task.sample(rng, band)
        if want_split is None or split_of(expr.key, config.seed, config.fractions) == want_split:
            return expr
    low, high = task.bands[band]
    raise RedkitError(
        f"task {config.task!r}: answers {low}..{high} have no structures in split {want_split!r}; use --split random"
    )


def _example(
    task: TextTask, rng: random.Random, expr: Expression, templates: tuple[str, ...], heldout: bool
) -> Example:
    template_id = rng.randrange(len(templates))
    answer = expr.value
    return Example(
        id=-1,
        question=task.render(expr, templates[template_id]),
        answer=answer,
        label=domain_of(answer) if in_vocabulary(answer) else None,
        num_ops=expr.num_ops,
        template=f"{'heldout' if heldout else 'train'}/{template_id}",
        structure=expr.key,
        **task.record_fields(expr),
    )


def generate(config: DataConfig) -> dict[str, list[Example]]:
    """{train, val, test, test_heldout_templates} -> examples, deterministic in config.seed."""
    task = TASKS[config.task]()
    rng = random.Random(config.seed)
    sizes = _split_sizes(config)
    exprs: dict[str, list[Expression]] = {}
    bands = len(task.bands)
    if config.split == "structure":
        for split in SPLITS:
            exprs[split] = [
                _draw(task, rng, band, split, config)
                for band, count in enumerate(_per_band(sizes[split], bands))
                for _ in range(count)
            ]
    else:  # random: draw the whole pool per band, then deal each band's examples out to the splits
        per_split_band = {split: _per_band(sizes[split], bands) for split in SPLITS}
        exprs = {split: [] for split in SPLITS}
        for band in range(bands):
            pool = [_draw(task, rng, band, None, config) for _ in range(sum(per_split_band[s][band] for s in SPLITS))]
            for split in SPLITS:
                count = per_split_band[split][band]
                exprs[split], pool = exprs[split] + pool[:count], pool[count:]
    datasets = {
        split: [_example(task, rng, e, task.train_templates, heldout=False) for e in exprs[split]] for split in SPLITS
    }
    datasets[HELDOUT] = [_example(task, rng, e, task.heldout_templates, heldout=True) for e in exprs["test"]]
    for split in datasets:  # shuffle so that ranges are interleaved, then number every example uniquely
        rng.shuffle(datasets[split])
    next_id = 0
    for split, examples in datasets.items():
        datasets[split] = [replace(ex, id=next_id + i) for i, ex in enumerate(examples)]
        next_id += len(examples)
    return datasets


def summarize(datasets: dict[str, list[Example]], config: DataConfig) -> dict:
    """What splits.json records: the config and, per split, counts in total and per domain."""
    return {
        "config": asdict(config),
        "splits": {
            split: {
                "count": len(examples),
                "per_domain": dict(sorted(Counter(ex.domain or "outside_2_100" for ex in examples).items())),
                "distinct_structures": len({ex.structure for ex in examples}),
            }
            for split, examples in datasets.items()
        },
    }


def write_dataset(out: str | Path, datasets: dict[str, list[Example]], config: DataConfig) -> dict:
    out = Path(out)
    task = TASKS[config.task]
    for split, examples in datasets.items():
        write_jsonl(out / f"{split}.jsonl", (task.record_json(ex) for ex in examples))
    summary = summarize(datasets, config)
    write_json(out / "splits.json", summary)
    return summary
