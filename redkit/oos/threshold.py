"""Larson et al.'s oos-threshold protocol: a query is out of scope when its score is below a
threshold τ chosen on validation data (in-scope val + oos_val), then on test

    in-scope accuracy  the in-scope query is above τ *and* its label is right (over all in-scope queries)
    OOS recall         the OOS query is below τ (over all OOS queries)
    AUROC              of the score separating in-scope from OOS queries (threshold-free)

τ maximises validation accuracy with out-of-scope as one more class, over in-scope val and oos_val
pooled (Larson et al.'s choice: on CLINC150 100 OOS against 3,000 in-scope queries, so a threshold
must not cost much in-scope accuracy to pay off). Pure numpy over scores and correctness flags.
"""

import numpy as np
from sklearn.metrics import roc_auc_score


def rates(
    threshold: float, in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray
) -> tuple[float, float]:
    """(in-scope accuracy, OOS recall) at `threshold`."""
    accepted = in_scores >= threshold
    return float((accepted & in_correct).mean()), float((oos_scores < threshold).mean())


def pooled_accuracy(threshold: float, in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray) -> float:
    """Accuracy over in-scope and OOS queries together, "out of scope" being one more class."""
    accuracy, recall = rates(threshold, in_scores, in_correct, oos_scores)
    return (accuracy * len(in_scores) + recall * len(oos_scores)) / (len(in_scores) + len(oos_scores))


def choose_threshold(in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray) -> float:
    """The τ among the observed scores (and -inf: never reject) of the highest pooled accuracy."""
    candidates = np.unique(np.concatenate([[-np.inf], in_scores, oos_scores]))
    objective = [pooled_accuracy(t, in_scores, in_correct, oos_scores) for t in candidates]
    return float(candidates[int(np.argmax(objective))])


def oos_metrics(threshold: float, in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray) -> dict:
    accuracy, recall = rates(threshold, in_scores, in_correct, oos_scores)
    truth = np.concatenate([np.ones(len(in_scores)), np.zeros(len(oos_scores))])
    return {
        "threshold": threshold,
        "in_scope_accuracy": accuracy,
        "oos_recall": recall,
        "auroc": float(roc_auc_score(truth, np.concatenate([in_scores, oos_scores]))),
    }


def tradeoff_curve(in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray, points: int = 101) -> dict:
    """In-scope accuracy and OOS recall as τ sweeps the scores' quantiles: the figure's line."""
    thresholds = np.quantile(np.concatenate([in_scores, oos_scores]), np.linspace(0, 1, points))
    pairs = [rates(t, in_scores, in_correct, oos_scores) for t in thresholds]
    return {"in_scope_accuracy": [a for a, _ in pairs], "oos_recall": [r for _, r in pairs]}
