"""Larson et al.'s oos-threshold protocol: a query is out of scope when its score is below a
threshold τ chosen on validation data (in-scope val + oos_val), then on test

    in-scope accuracy  the in-scope query is above τ *and* its label is right (over all in-scope queries)
    OOS recall         the OOS query is below τ (over all OOS queries)
    AUROC              of the score separating in-scope from OOS queries (threshold-free)

τ maximises in-scope accuracy + OOS recall on validation (each a rate, so both count alike).
Pure numpy over scores and correctness flags.
"""

import numpy as np
from sklearn.metrics import roc_auc_score


def rates(threshold: float, in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray) -> tuple[float, float]:
    """(in-scope accuracy, OOS recall) at `threshold`."""
    accepted = in_scores >= threshold
    return float((accepted & in_correct).mean()), float((oos_scores < threshold).mean())


def choose_threshold(in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray) -> float:
    """The τ among the observed scores (and -inf: never reject) maximising accuracy + recall."""
    candidates = np.unique(np.concatenate([[-np.inf], in_scores, oos_scores]))
    objective = [sum(rates(t, in_scores, in_correct, oos_scores)) for t in candidates]
    return float(candidates[int(np.argmax(objective))])


def oos_metrics(threshold: float, in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray) -> dict:
    accuracy, recall = rates(threshold, in_scores, in_correct, oos_scores)
    truth = np.concatenate([np.ones(len(in_scores)), np.zeros(len(oos_scores))])
    return {"threshold": threshold, "in_scope_accuracy": accuracy, "oos_recall": recall,
            "auroc": float(roc_auc_score(truth, np.concatenate([in_scores, oos_scores])))}


def tradeoff_curve(in_scores: np.ndarray, in_correct: np.ndarray, oos_scores: np.ndarray, points: int = 101) -> dict:
    """In-scope accuracy and OOS recall as τ sweeps the scores' quantiles: the figure's line."""
    thresholds = np.quantile(np.concatenate([in_scores, oos_scores]), np.linspace(0, 1, points))
    pairs = [rates(t, in_scores, in_correct, oos_scores) for t in thresholds]
    return {"in_scope_accuracy": [a for a, _ in pairs], "oos_recall": [r for _, r in pairs]}
