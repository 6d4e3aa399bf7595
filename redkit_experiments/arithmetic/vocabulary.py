"""The answer vocabulary and the five numerical domains (docs/guides/design.md, decision 1).

The model predicts the exact answer as a class: answers 2..100, so 99 classes, class index =
answer - 2 (`redkit.space.ANSWER_RANGES` maps them). The answer's range R1..R5 is the example's
*domain*: it picks the expert in training and is the router's target.
"""

from redkit.errors import RedkitError

MIN_ANSWER, MAX_ANSWER = 2, 100
NUM_CLASSES = MAX_ANSWER - MIN_ANSWER + 1  # 99
VOCABULARY = (MIN_ANSWER, MAX_ANSWER)  # inclusive

# (low, high) inclusive, in label order 0..4
RANGES: tuple[tuple[int, int], ...] = ((2, 20), (21, 40), (41, 60), (61, 80), (81, 100))
NUM_DOMAINS = len(RANGES)
DOMAIN_NAMES = tuple(f"range_{lo}_{hi}" for lo, hi in RANGES)  # the original authors' spelling
SHORT_NAMES = tuple(f"R{i + 1}" for i in range(NUM_DOMAINS))  # the paper's spelling

# Answers on either side of a range boundary, reported separately.
BOUNDARY_ANSWERS = (20, 21, 40, 41, 60, 61, 80, 81)


def in_vocabulary(answer: int) -> bool:
    return MIN_ANSWER <= answer <= MAX_ANSWER


def domain_of(answer: int) -> int:
    """The label 0..4 of the range that holds `answer`."""
    for label, (lo, hi) in enumerate(RANGES):
        if lo <= answer <= hi:
            return label
    raise RedkitError(f"answer {answer} is outside the vocabulary {MIN_ANSWER}..{MAX_ANSWER}")


def parse_domain(name: str) -> int:
    """'range_41_60', 'R3' or '2' -> label 2; anything else is an error."""
    text = str(name).strip()
    if text in DOMAIN_NAMES:
        return DOMAIN_NAMES.index(text)
    if text.upper() in SHORT_NAMES:
        return SHORT_NAMES.index(text.upper())
    # ASCII and short: "²".isdigit() yet int("²") fails, and int() refuses over 4,300 digits
    if text.isascii() and text.isdigit() and len(text) < 4 and int(text) < NUM_DOMAINS:
        return int(text)
    raise RedkitError(f"unknown domain {text[:40]!r} (expected one of {', '.join(DOMAIN_NAMES)} or R1..R5)")
