"""Run-level evaluation in one place: every composition and reference of a run scored on its
splits, on any file it reads and on out-of-scope queries (the metrics themselves are
redkit/metrics.py; out of scope, redkit/oos).

    evaluate_run          every split of the run's `evaluation_splits`, router and gate accuracy,
                          the --eval files and the OOS protocol: what results.json holds
    evaluate_file         every composition on a file the run reads (evaluation only)
    evaluate_examples     {composition or reference: metrics} of examples, broken down by the run's groups
    evaluate_compositions / score_composed   the compositions' predictions on features, scored
"""

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import f1_score

from redkit.compositions import (
    NEEDS_DOMAIN,
    Composed,
    ModuleSet,
    available_compositions,
    compose,
    default_compositions,
)
from redkit.metrics import accuracy_by, label_metrics
from redkit.space import LabelSpace


def evaluate_compositions(
    modules: ModuleSet,
    h: torch.Tensor,
    classes: torch.Tensor,
    labels: torch.Tensor,
    names: list[str],
    metrics: Callable[[np.ndarray, np.ndarray], dict] = label_metrics,
    groups: dict[str, list[str]] | None = None,
    domain_accuracy: bool = False,
) -> dict[str, dict]:
    """{composition: metrics(predicted, true)} on one set of features, with the mean expert weights
    per true domain where the composition has weights, and accuracy per group for each of
    `groups` ({"num_ops": one key per example, ...}) as result["by_num_ops"]. Predictions are
    passed to `metrics` as the values their classes stand for (the run's LabelSpace). With
    `domain_accuracy`, a composition with weights also says how often its top-weighted expert is
    the example's own domain (a fit run's stand-in for Task 1's range accuracy)."""
    h, labels = h.to(modules.run.device), labels.to(modules.run.device)
    return {
        name: score_composed(
            compose(name, modules, h, labels), classes, labels, modules.run.space, metrics, groups, domain_accuracy
        )
        for name in names
    }


def score_composed(
    composed: Composed,
    classes: torch.Tensor,
    labels: torch.Tensor,
    space: LabelSpace,
    metrics: Callable[[np.ndarray, np.ndarray], dict] = label_metrics,
    groups: dict[str, list[str]] | None = None,
    domain_accuracy: bool = False,
) -> dict:
    """metrics(predicted, true) of one composition's output (probs (N, C), weights (N, K) or None)
    against the true classes (N,) and domains (N,), with the breakdowns of `evaluate_compositions`."""
    true = space.value_of(classes.numpy())
    pred = space.value_of(composed.probs.argmax(dim=-1).cpu().numpy())
    result = metrics(pred, true)
    for group, keys in (groups or {}).items():
        result[f"by_{group}"] = accuracy_by(pred, true, keys)
    if composed.weights is not None:
        weights, domain = composed.weights.cpu(), labels.cpu()
        result["mean_weights_by_domain"] = {
            space.domains[k]: weights[domain == k].mean(dim=0).tolist()
            for k in range(space.num_domains)
            if (domain == k).any()
        }
        if domain_accuracy:
            known = domain >= 0  # a record of an evaluated file may have no domain of the run
            result["domain_accuracy"] = (
                float((weights.argmax(dim=-1)[known] == domain[known]).float().mean()) if known.any() else None
            )
    return result


@torch.no_grad()
def routing_accuracy(router: torch.nn.Module, h: torch.Tensor, labels: torch.Tensor) -> dict:
    """How often the router's top expert is the true domain, and the macro-F1 of that choice."""
    pred = router(h).argmax(dim=-1).cpu().numpy()
    true = labels.cpu().numpy()
    return {
        "accuracy": float((pred == true).mean()),
        "macro_f1": float(f1_score(true, pred, average="macro", zero_division=0)),
    }


def evaluate_file(run, modules: ModuleSet, path: Path, names: list[str]) -> dict:
    """Every composition on any file the run reads (evaluation only, never training). The oracle
    compositions are left out where a record has no domain of the run (a fit run's file may not)."""
    examples = run.read_file(path)
    labels = torch.tensor([run.domain_label(ex) for ex in examples])
    return evaluate_examples(run, modules, f"file-{path.stem}", examples, names, labels)


def evaluate_examples(
    run, modules: ModuleSet, name: str, examples: list, names: list[str], labels: torch.Tensor | None = None
) -> dict:
    """{composition: metrics} of `examples` (features cached under `name`), broken down by the run's groups."""
    h = run.features(name, examples)
    labels = torch.tensor([run.domain_label(ex) for ex in examples]) if labels is None else labels
    if (labels < 0).any():
        names = [n for n in names if n not in NEEDS_DOMAIN]
    classes, groups = run.classes(examples), run.groups(examples)
    results = evaluate_compositions(
        modules, h, classes, labels, names, metrics=run.metrics, groups=groups, domain_accuracy=bool(run.space.labels)
    )
    if run.config.references and run.bundle is None:  # a bundle carries RED's modules, not the references
        for reference in run.config.references:
            results[reference] = score_reference(run, reference, name, examples, labels)
    return results


def score_reference(run, reference: str, name: str, examples: list, labels: torch.Tensor) -> dict:
    """A reference's (joint, linear_probe) metrics on `examples`, whose features are cached under `name`."""
    from redkit.references import REFERENCES

    composed = Composed(REFERENCES[reference].probs(run, name, [ex.question for ex in examples]), None)
    return score_composed(composed, run.classes(examples), labels, run.space, run.metrics, run.groups(examples))


def evaluate_run(run, eval_files: tuple[Path, ...] = ()) -> dict:
    start = time.perf_counter()
    modules = ModuleSet(run)
    # a replay-free run has no module trained on pooled data (the heads): the compositions that need one are not scored
    names, _ = available_compositions(modules, default_compositions(run.space))
    results = {"splits": {}, "router": {}, "gate": {}, "external": {}}
    for split in run.evaluation_splits:
        results["splits"][split] = evaluate_examples(run, modules, split, run.splits[split], names)
    # A run of tuned owners reads a text through every owner's top layers (redkit/fitting/tuned_encoder.py): its
    # router's accuracy on the training texts is not worth K top passes over each of them.
    from redkit.fitting.replay_free import has_tuned_owners

    for split in ("val", "test") if has_tuned_owners(run.config) else ("train", "val", "test"):
        if split in run.splits:
            h, _, labels = run.split_tensors(split)
            results["router"][split] = routing_accuracy(modules.router(), h.to(run.device), labels)
            results["gate"][split] = routing_accuracy(modules.gate(), h.to(run.device), labels)
    for path in eval_files:
        results["external"][Path(path).name] = evaluate_file(run, modules, Path(path), names)
    if run.oos_texts:
        from redkit.oos.evaluate import evaluate_oos

        results["oos"] = evaluate_oos(run, modules, names)
    run.add_time("evaluate", time.perf_counter() - start)
    return results
