"""Metrics of predicted vs true answers of Task 1/2, in numpy (exact answers; their ranges R1..R5).

- exact accuracy: the predicted answer is the true answer (the model's task);
- range accuracy: the predicted answer lies in the true answer's range;
- macro-F1 over the classes with support in the evaluated subset (scikit-learn), and the paper's
  per-range F1 over all 99 classes (≈0.2 at best, since a range holds ~20 of them) beside it;
- accuracy and F1 per range, and accuracy at the answers either side of a range boundary.
"""

import numpy as np

from redkit.metrics import macro_f1
from redkit_experiments.arithmetic.vocabulary import BOUNDARY_ANSWERS, MAX_ANSWER, MIN_ANSWER, RANGES, SHORT_NAMES


def _macro_f1(true: np.ndarray, pred: np.ndarray, all_classes: bool = False) -> float:
    return macro_f1(true, pred, np.arange(MIN_ANSWER, MAX_ANSWER + 1) if all_classes else None)


def _range_of(answers: np.ndarray) -> np.ndarray:
    """Label 0..4 of each answer's range; -1 below 2..100 and 5 above it (no range)."""
    return np.where(answers < MIN_ANSWER, -1, np.searchsorted([hi for _, hi in RANGES], answers))


def prediction_metrics(pred_answers: np.ndarray, true_answers: np.ndarray) -> dict:
    """Metrics of predicted vs true answers (N,), as values (not class indices)."""
    true_ranges = _range_of(true_answers)
    out = {
        "n": int(len(true_answers)),
        "accuracy": float((pred_answers == true_answers).mean()),
        "range_accuracy": float((_range_of(pred_answers) == true_ranges).mean()),
        "macro_f1": _macro_f1(true_answers, pred_answers),
        "per_range": {},
        "boundary": {},
    }
    for label, name in enumerate(SHORT_NAMES):
        rows = true_ranges == label
        if rows.any():
            out["per_range"][name] = {
                "n": int(rows.sum()),
                "accuracy": float((pred_answers[rows] == true_answers[rows]).mean()),
                "macro_f1": _macro_f1(true_answers[rows], pred_answers[rows]),
                "macro_f1_99": _macro_f1(true_answers[rows], pred_answers[rows], all_classes=True),
            }
    for answer in BOUNDARY_ANSWERS:
        rows = true_answers == answer
        if rows.any():
            out["boundary"][str(answer)] = {
                "n": int(rows.sum()),
                "accuracy": float((pred_answers[rows] == answer).mean()),
            }
    return out
