"""Metrics of predicted vs true values, in numpy; a leaf that runs, benchmarks and
redkit/evaluate.py all use. Macro-F1 is over the classes with support in the evaluated subset
(scikit-learn).

    label_metrics           a run whose classes are names: accuracy, macro-F1, unseen labels counted
    classification_metrics  precision, recall and F1 per class, their macro and weighted means and the
                            confusion matrix, overall and per domain (classes each in one domain)
    accuracy_by             accuracy within each group of examples sharing a key
"""

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support

from redkit.space import UNSEEN


def macro_f1(true: np.ndarray, pred: np.ndarray, labels: np.ndarray | None = None) -> float:
    """Macro-F1 over `labels` (default: the classes with support in `true`)."""
    labels = np.unique(true) if labels is None else labels
    return float(f1_score(true, pred, labels=labels, average="macro", zero_division=0))


def label_metrics(pred: np.ndarray, true: np.ndarray) -> dict:
    """Metrics of predicted vs true labels (N,) of a run whose classes are names (a fit run). A
    label the run never saw in training (UNSEEN) counts as wrong, is left out of the macro-F1's
    mean (no prediction can hit it) and is counted apart."""
    seen = true != UNSEEN
    return {
        "n": int(len(true)),
        "accuracy": float((pred == true).mean()),
        "macro_f1": macro_f1(true[seen], pred[seen]) if seen.any() else 0.0,
        "unseen_labels": int((~seen).sum()),
    }


def _scores(pred: np.ndarray, true: np.ndarray, num_classes: int) -> dict:
    """Accuracy, macro / weighted P-R-F1 over the classes with support here (docs/guides/design.md, decision 5),
    per-class scores of those classes, and the full (C, C) confusion matrix (rows true, columns
    predicted), so that matrices of different subsets add up."""
    present = np.unique(true)
    out = {"n": int(len(true)), "accuracy": float((pred == true).mean()) if len(true) else 0.0}
    for average in ("macro", "weighted"):
        p, r, f, _ = precision_recall_fscore_support(true, pred, labels=present, average=average, zero_division=0)
        out |= {f"{average}_precision": float(p), f"{average}_recall": float(r), f"{average}_f1": float(f)}
    p, r, f, support = precision_recall_fscore_support(true, pred, labels=present, average=None, zero_division=0)
    out["per_class"] = {
        str(c): {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(support[i])}
        for i, c in enumerate(present)
    }
    out["confusion_matrix"] = confusion_matrix(true, pred, labels=np.arange(num_classes)).tolist()
    return out


def classification_metrics(pred: np.ndarray, true: np.ndarray, domain_of_class: Sequence[str]) -> dict:
    """{"overall": scores, "per_domain": {domain: scores}} of predicted vs true classes (N,).

    `domain_of_class[c]` names the domain of class c (its length is the number of classes C); a
    domain's subset is the examples whose *true* class is in it, and `domain_accuracy` says how
    often the predicted class at least falls in the true class's domain (a routing-level hit)."""
    domain_of = np.asarray(domain_of_class)
    num_classes = len(domain_of)
    overall = _scores(pred, true, num_classes) | {"domain_accuracy": float((domain_of[pred] == domain_of[true]).mean())}
    per_domain = {}
    for domain in dict.fromkeys(domain_of_class):  # in class order, each once
        rows = domain_of[true] == domain
        if rows.any():
            per_domain[domain] = _scores(pred[rows], true[rows], num_classes) | {
                "domain_accuracy": float((domain_of[pred[rows]] == domain).mean())
            }
    return {"overall": overall, "per_domain": per_domain}


def accuracy_by(pred: np.ndarray, true: np.ndarray, keys: list[str]) -> dict[str, dict]:
    """Exact accuracy within each group of examples sharing a key (e.g. number of operands)."""
    keys_array = np.asarray(keys)
    return {
        key: {
            "n": int((keys_array == key).sum()),
            "accuracy": float((pred[keys_array == key] == true[keys_array == key]).mean()),
        }
        for key in sorted(set(keys), key=lambda k: (len(k), k))
    }
