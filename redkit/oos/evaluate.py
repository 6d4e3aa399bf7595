"""Every composition and reference of a run under the oos-threshold protocol.

For each composition and score (redkit/oos/scores.py) the threshold is chosen on val (in-scope val
+ oos_val) and applied to test (+ oos_test); each composition keeps the score that did best on
val. `<run>/oos.json` records {composition: {score, threshold}}: what `predict` answers "out of
scope" under. Oracle compositions are left out: an out-of-scope query has no true domain.
"""

from pathlib import Path

import numpy as np
import torch

from redkit.atomic import write_json
from redkit.compositions import NEEDS_DOMAIN, compose
from redkit.oos.scores import score_table
from redkit.oos.threshold import choose_threshold, oos_metrics, rates, tradeoff_curve

OOS_FILE = "oos.json"


def _scored(run, modules, names: list[str], split: str, examples: list | None, oos_split: str) -> dict:
    """{name: (in-scope scores {score: (N,)}, correct (N,), OOS scores {score: (M,)})} of one split."""
    texts = run.oos_texts[oos_split]
    h_in = run.features(split, examples).to(run.device)
    h_out = run.features(oos_split, [_Text(t) for t in texts]).to(run.device)
    truth = run.classes(examples).numpy()
    out = {}
    for name in names:
        composed_in = compose(name, modules, h_in, torch.zeros(len(h_in), dtype=torch.long, device=run.device))
        composed_out = compose(name, modules, h_out, torch.zeros(len(h_out), dtype=torch.long, device=run.device))
        out[name] = _entry(composed_in.probs, composed_in.weights, composed_out.probs, composed_out.weights, truth)
    if run.config.references and run.bundle is None:
        from redkit.references import REFERENCES

        for name in run.config.references:
            probs_in = REFERENCES[name].probs(run, split, [ex.question for ex in examples])
            probs_out = REFERENCES[name].probs(run, oos_split, texts)
            out[name] = _entry(probs_in, None, probs_out, None, truth)
    return out


class _Text:
    """A bare text, where run.features expects records with a `question`."""

    def __init__(self, text: str):
        self.question = text


def _entry(probs_in, weights_in, probs_out, weights_out, truth: np.ndarray) -> tuple:
    correct = probs_in.argmax(dim=-1).cpu().numpy() == truth
    scores_in = {k: v.cpu().numpy() for k, v in score_table(probs_in, weights_in).items()}
    scores_out = {k: v.cpu().numpy() for k, v in score_table(probs_out, weights_out).items()}
    return scores_in, correct, scores_out


def evaluate_oos(run, modules, names: list[str]) -> dict:
    """{"chosen": {name: {score, threshold, val: metrics}}, "test": {name: {score: metrics}},
    "curves": {name: test trade-off of the chosen score}}; {} where the run has no OOS validation set."""
    if "oos_val" not in run.oos_texts:
        return {}
    names = [n for n in names if n not in NEEDS_DOMAIN]
    val = _scored(run, modules, names, "val", run.splits["val"], "oos_val")
    chosen = {}
    for name, (scores_in, correct, scores_out) in val.items():
        best = None
        for score in scores_in:
            tau = choose_threshold(scores_in[score], correct, scores_out[score])
            objective = sum(rates(tau, scores_in[score], correct, scores_out[score]))
            if best is None or objective > best[0]:
                best = (objective, score, tau)
        _, score, tau = best
        chosen[name] = {"score": score, "threshold": tau,
                        "val": oos_metrics(tau, scores_in[score], correct, scores_out[score])}
    results = {"chosen": chosen, "test": {}, "curves": {}}
    if "test" in run.splits and "oos_test" in run.oos_texts:
        test = _scored(run, modules, names, "test", run.splits["test"], "oos_test")
        for name, (scores_in, correct, scores_out) in test.items():
            tau = chosen[name]["threshold"]
            results["test"][name] = oos_metrics(tau, scores_in[chosen[name]["score"]], correct, scores_out[chosen[name]["score"]])
            results["test"][name]["score"] = chosen[name]["score"]
            results["curves"][name] = tradeoff_curve(scores_in[chosen[name]["score"]], correct, scores_out[chosen[name]["score"]])
    if run.bundle is None:
        write_json(Path(run.dir) / OOS_FILE, {name: {"score": c["score"], "threshold": c["threshold"]} for name, c in chosen.items()})
    return results


def figure_tradeoff(directory: Path, results: dict, names: list[str]) -> str:
    """In-scope accuracy against OOS recall on test as the threshold moves, one line per composition;
    a dot where each composition's val-chosen threshold puts it."""
    import matplotlib.pyplot as plt

    from redkit.report import save_figure

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for name in names:
        if name not in results["curves"]:
            continue
        curve, point = results["curves"][name], results["test"][name]
        line, = ax.plot(curve["oos_recall"], curve["in_scope_accuracy"], label=name, linewidth=1.2)
        ax.plot([point["oos_recall"]], [point["in_scope_accuracy"]], "o", color=line.get_color(), markersize=4)
    ax.set_xlabel("OOS recall (test)")
    ax.set_ylabel("in-scope accuracy (test)")
    ax.set_ylim(0.85, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("oos-threshold trade-off (dot: threshold chosen on val)")
    return save_figure(fig, directory / "figures" / "oos_tradeoff.png")
