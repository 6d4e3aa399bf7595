"""A composition's predictions on features, scored (the metrics themselves are redkit/metrics.py)."""

from typing import Callable

import numpy as np
import torch
from sklearn.metrics import f1_score

from redkit.compositions import Composed, ModuleSet, compose
from redkit.metrics import accuracy_by, prediction_metrics
from redkit.space import LabelSpace


def evaluate_compositions(modules: ModuleSet, h: torch.Tensor, classes: torch.Tensor, labels: torch.Tensor,
                          names: list[str], metrics: Callable[[np.ndarray, np.ndarray], dict] = prediction_metrics,
                          groups: dict[str, list[str]] | None = None, domain_accuracy: bool = False) -> dict[str, dict]:
    """{composition: metrics(predicted, true)} on one set of features, with the mean expert weights
    per true domain where the composition has weights, and accuracy per group for each of
    `groups` ({"num_ops": one key per example, ...}) as result["by_num_ops"]. Predictions are
    passed to `metrics` as the values their classes stand for (the run's LabelSpace). With
    `domain_accuracy`, a composition with weights also says how often its top-weighted expert is
    the example's own domain (a fit run's stand-in for Task 1's range accuracy)."""
    h, labels = h.to(modules.run.device), labels.to(modules.run.device)
    return {name: score_composed(compose(name, modules, h, labels), classes, labels, modules.run.space, metrics, groups,
                                 domain_accuracy) for name in names}


def score_composed(composed: Composed, classes: torch.Tensor, labels: torch.Tensor, space: LabelSpace,
                   metrics: Callable[[np.ndarray, np.ndarray], dict] = prediction_metrics,
                   groups: dict[str, list[str]] | None = None, domain_accuracy: bool = False) -> dict:
    """metrics(predicted, true) of one composition's output (probs (N, C), weights (N, K) or None)
    against the true classes (N,) and domains (N,), with the breakdowns of `evaluate_compositions`."""
    true = space.value_of(classes.numpy())
    pred = space.value_of(composed.probs.argmax(dim=-1).cpu().numpy())
    result = metrics(pred, true)
    for group, keys in (groups or {}).items():
        result[f"by_{group}"] = accuracy_by(pred, true, keys)
    if composed.weights is not None:
        weights, domain = composed.weights.cpu(), labels.cpu()
        result["mean_weights_by_domain"] = {space.domains[k]: weights[domain == k].mean(dim=0).tolist()
                                            for k in range(space.num_domains) if (domain == k).any()}
        if domain_accuracy:
            known = domain >= 0  # a record of an evaluated file may have no domain of the run
            result["domain_accuracy"] = float((weights.argmax(dim=-1)[known] == domain[known]).float().mean()) if known.any() else None
    return result


@torch.no_grad()
def routing_accuracy(router: torch.nn.Module, h: torch.Tensor, labels: torch.Tensor) -> dict:
    """How often the router's top expert is the true range, and the macro-F1 of that choice."""
    pred = router(h).argmax(dim=-1).cpu().numpy()
    true = labels.cpu().numpy()
    return {"accuracy": float((pred == true).mean()), "macro_f1": float(f1_score(true, pred, average="macro", zero_division=0))}
