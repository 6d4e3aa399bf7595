"""How a fit run fine-tunes its backbone (stage base, which at base fraction 1.0 is the `joint`
reference), and how `auto` settles max length, trainable layers and epochs from the training texts.

The recipe is BERT's fine-tuning recipe (Devlin et al. 2019) as google/uncertainty-baselines runs it
on CLINC150 (`baselines/clinc_intent`): AdamW with weight decay 0.01, linear warm-up over the first
10 % of steps then linear decay to 0, dropout 0.1 (the backbone's own), batches of 32, plus label
smoothing 0.1 (Szegedy et al. 2016; Müller et al. 2019). The learning rate was chosen on CLINC150's
val by `redkit study tuning` (docs/results/clinc150.md). What it adds for a CPU: batches of texts of similar
lengths, each padded only to its longest (transformers' `group_by_length`), and the best epoch kept
by val accuracy (ties: val loss).

`auto` (the fit default for each of the three) is settled from the training texts once, before
anything is written, and recorded as numbers in the run's config:

    max_length        the fewest tokens covering COVERAGE of the training texts, at most the
                      backbone's limit (texts longer than that are cut, and the run says how many)
    trainable layers  every layer when at least MIN_EPOCHS epochs through all of them fit in
                      TOKEN_BUDGET token-layer passes, else the most layers that do (at least 1)
    epochs            as many as TOKEN_BUDGET allows at those layers, at most MAX_EPOCHS

TOKEN_BUDGET bounds the fine-tuning's compute by the data's size: CLINC150 (15,000 short queries,
about 200,000 tokens) gets every layer for MAX_EPOCHS epochs; 22,000 texts cut at 128 tokens
(2.8M tokens) get the top 2 layers for 2 epochs, which a 2-core CPU trains in about 20 minutes.
"""

import math
from dataclasses import dataclass

COVERAGE = 0.99
TOKEN_BUDGET = 12_000_000  # token x layer passes of one fine-tuning (forward + backward)
MAX_EPOCHS = 6
MIN_EPOCHS = 2

# The stage-base (and joint) settings of a fit run; the stages on cached features keep theirs.
TUNING = {
    "lr": 2e-4,
    "head_lr": None,
    "batch_size": 32,
    "virtual_batch_size": 32,
    "max_epochs": MAX_EPOCHS,
    "patience": 3,
    "weight_decay": 0.01,
    "schedule": "linear",
    "warmup_ratio": 0.1,
    "label_smoothing": 0.1,
    "select_by": "accuracy",
    "length_grouped": True,
}


@dataclass(frozen=True)
class Settled:
    """What `auto` chose, and what it was chosen from (said once by fit, recorded in splits.json)."""

    max_length: int
    cut: int  # training texts longer than max_length
    trainable_layers: int
    epochs: int
    tokens: int  # of train, each text cut at max_length

    def line(self, texts: int) -> str:
        return (
            f"max_length {self.max_length} tokens ({texts - self.cut:,} of {texts:,} training texts fit, "
            f"{self.cut:,} cut); {self.tokens:,} training tokens: {self.trainable_layers} trainable layers, "
            f"up to {self.epochs} epochs"
        )


def covering_length(lengths: list[int], limit: int, coverage: float = COVERAGE) -> int:
    """The fewest tokens that hold `coverage` of the texts whole, at most `limit`."""
    if not lengths:
        return limit
    ordered = sorted(lengths)
    return min(limit, ordered[max(0, math.ceil(coverage * len(ordered)) - 1)])


def epochs_within(tokens: int, layers: int, budget: int = TOKEN_BUDGET) -> int:
    """The epochs `budget` allows through `layers` tuned layers (MIN_EPOCHS..MAX_EPOCHS)."""
    return max(MIN_EPOCHS, min(MAX_EPOCHS, budget // (max(tokens, 1) * layers)))


def most_layers(tokens: int, num_layers: int, budget: int = TOKEN_BUDGET) -> int:
    """The most layers (at least 1) through which MIN_EPOCHS epochs fit in `budget`."""
    return next((n for n in range(num_layers, 0, -1) if max(tokens, 1) * n * MIN_EPOCHS <= budget), 1)


def settle(
    lengths: list[int],
    num_layers: int,
    limit: int,
    max_length: int | None = None,
    trainable_layers: int | None = None,
    epochs: int | None = None,
) -> Settled:
    """Settle what is `auto` (None) from the training texts' token lengths (special tokens included)."""
    length = max_length or covering_length(lengths, limit)
    tokens = sum(min(n, length) for n in lengths)
    layers = trainable_layers or most_layers(tokens, num_layers)
    return Settled(length, sum(n > length for n in lengths), layers, epochs or epochs_within(tokens, layers), tokens)
