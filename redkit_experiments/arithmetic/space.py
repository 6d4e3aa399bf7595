"""Task 1/2's label space: the 99 answers 2..100, one expert per answer range R1..R5."""

from redkit.space import LabelSpace
from redkit_experiments.arithmetic.vocabulary import MAX_ANSWER, MIN_ANSWER, NUM_CLASSES, RANGES, SHORT_NAMES

ANSWER_RANGES = LabelSpace(
    num_classes=NUM_CLASSES,
    domains=SHORT_NAMES,
    first_value=MIN_ANSWER,
    class_domains=tuple(
        next(k for k, (low, high) in enumerate(RANGES) if low <= value <= high)
        for value in range(MIN_ANSWER, MAX_ANSWER + 1)
    ),
)
