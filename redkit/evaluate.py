"""Metrics of a composition's predictions (DESIGN.md decisions 1 and 5).

- exact accuracy: the predicted answer is the true answer (the model's task);
- range accuracy: the predicted answer lies in the true answer's range;
- macro-F1 over the classes with support in the evaluated subset (scikit-learn), and the paper's
  per-range F1 over all 99 classes (≈0.2 at best, since a range holds ~20 of them) beside it;
- accuracy and F1 per range, and accuracy at the answers either side of a range boundary.

`classification_metrics` is the general-purpose counterpart for benchmarks whose classes are few
and each belongs to one domain (the digits: 10 classes, 5 label pairs): precision, recall and F1
per class, their macro and weighted means, and the confusion matrix, overall and per domain.
"""

from typing import Callable, Sequence

import numpy as np
import torch
from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support

from redkit.compositions import ModuleSet, compose
from redkit.data.vocabulary import BOUNDARY_ANSWERS, NUM_CLASSES, RANGES, SHORT_NAMES, class_to_answer


def _macro_f1(true: np.ndarray, pred: np.ndarray, all_classes: bool = False) -> float:
    labels = np.arange(NUM_CLASSES) if all_classes else np.unique(true)
    return float(f1_score(true, pred, labels=labels, average="macro", zero_division=0))


def _range_of(answers: np.ndarray) -> np.ndarray:
    return np.searchsorted([hi for _, hi in RANGES], answers)  # label 0..4 of each answer


def prediction_metrics(pred_classes: np.ndarray, true_classes: np.ndarray) -> dict:
    pred_answers, true_answers = class_to_answer(pred_classes), class_to_answer(true_classes)
    true_ranges = _range_of(true_answers)
    out = {"n": int(len(true_classes)),
           "accuracy": float((pred_classes == true_classes).mean()),
           "range_accuracy": float((_range_of(pred_answers) == true_ranges).mean()),
           "macro_f1": _macro_f1(true_classes, pred_classes),
           "per_range": {}, "boundary": {}}
    for label, name in enumerate(SHORT_NAMES):
        rows = true_ranges == label
        if rows.any():
            out["per_range"][name] = {"n": int(rows.sum()), "accuracy": float((pred_classes[rows] == true_classes[rows]).mean()),
                                      "macro_f1": _macro_f1(true_classes[rows], pred_classes[rows]),
                                      "macro_f1_99": _macro_f1(true_classes[rows], pred_classes[rows], all_classes=True)}
    for answer in BOUNDARY_ANSWERS:
        rows = true_answers == answer
        if rows.any():
            out["boundary"][str(answer)] = {"n": int(rows.sum()), "accuracy": float((pred_answers[rows] == answer).mean())}
    return out


def _scores(pred: np.ndarray, true: np.ndarray, num_classes: int) -> dict:
    """Accuracy, macro / weighted P-R-F1 over the classes with support here (DESIGN decision 5),
    per-class scores of those classes, and the full (C, C) confusion matrix (rows true, columns
    predicted), so that matrices of different subsets add up."""
    present = np.unique(true)
    out = {"n": int(len(true)), "accuracy": float((pred == true).mean()) if len(true) else 0.0}
    for average in ("macro", "weighted"):
        p, r, f, _ = precision_recall_fscore_support(true, pred, labels=present, average=average, zero_division=0)
        out |= {f"{average}_precision": float(p), f"{average}_recall": float(r), f"{average}_f1": float(f)}
    p, r, f, support = precision_recall_fscore_support(true, pred, labels=present, average=None, zero_division=0)
    out["per_class"] = {str(c): {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(support[i])}
                        for i, c in enumerate(present)}
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
                "domain_accuracy": float((domain_of[pred[rows]] == domain).mean())}
    return {"overall": overall, "per_domain": per_domain}


def accuracy_by(pred: np.ndarray, true: np.ndarray, keys: list[str]) -> dict[str, dict]:
    """Exact accuracy within each group of examples sharing a key (e.g. number of operands)."""
    keys_array = np.asarray(keys)
    return {key: {"n": int((keys_array == key).sum()), "accuracy": float((pred[keys_array == key] == true[keys_array == key]).mean())}
            for key in sorted(set(keys), key=lambda k: (len(k), k))}


def evaluate_compositions(modules: ModuleSet, h: torch.Tensor, classes: torch.Tensor, labels: torch.Tensor,
                          names: list[str], metrics: Callable[[np.ndarray, np.ndarray], dict] = prediction_metrics,
                          groups: dict[str, list[str]] | None = None) -> dict[str, dict]:
    """{composition: metrics(pred classes, true classes)} on one set of features, with the mean
    expert weights per true domain where the composition has weights, and accuracy per group
    for each of `groups` ({"num_ops": one key per example, ...}) as result["by_num_ops"]."""
    h, labels = h.to(modules.run.device), labels.to(modules.run.device)
    domains = modules.run.space.domains
    results = {}
    for name in names:
        composed = compose(name, modules, h, labels)
        pred = composed.probs.argmax(dim=-1).cpu().numpy()
        result = metrics(pred, classes.numpy())
        for group, keys in (groups or {}).items():
            result[f"by_{group}"] = accuracy_by(pred, classes.numpy(), keys)
        if composed.weights is not None:
            weights, true = composed.weights.cpu(), labels.cpu()
            result["mean_weights_by_domain"] = {domains[k]: weights[true == k].mean(dim=0).tolist()
                                                for k in range(len(domains)) if (true == k).any()}
        results[name] = result
    return results


@torch.no_grad()
def routing_accuracy(router: torch.nn.Module, h: torch.Tensor, labels: torch.Tensor) -> dict:
    """How often the router's top expert is the true range, and the macro-F1 of that choice."""
    pred = router(h).argmax(dim=-1).cpu().numpy()
    true = labels.cpu().numpy()
    return {"accuracy": float((pred == true).mean()), "macro_f1": float(f1_score(true, pred, average="macro", zero_division=0))}
