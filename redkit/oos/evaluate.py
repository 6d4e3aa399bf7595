"""Every composition and reference of a run under the oos-threshold protocol.

For each composition and score (redkit/oos/scores.py) the threshold is chosen on val (in-scope val
+ oos_val) and applied to test (+ oos_test); each composition keeps the score that did best on
val. `<run>/oos.json` records {composition: {score, threshold[, stats]}} (stats: what the `views`
or `owners` score is standardised by, from val, the ridge's weight folded into its spread): what `predict`
answers "out of scope" under. Oracle compositions are left out: an out-of-scope query has no true domain.
"""

from pathlib import Path
from typing import NamedTuple

import torch

from redkit.atomic import write_json
from redkit.compositions import NEEDS_DOMAIN, MissingModule, compose
from redkit.fitting.replay_free import is_replay_free
from redkit.oos.owner_density import OWNER_SCORES, OWNERS, RIDGE_WEIGHTS, owner_scores
from redkit.oos.scores import nearest_in_domain, nearest_similarity, score_table, standardised_sum, standardising_stats
from redkit.oos.threshold import choose_threshold, oos_metrics, pooled_accuracy, tradeoff_curve

OOS_FILE = "oos.json"


class Views(NamedTuple):
    """What the nearest-neighbour scores compare a query with: the training texts' tuned features
    (M, d) and domains (M,), and their pretrained (untuned) backbone's features (M, d')."""

    bank: torch.Tensor
    bank_domains: torch.Tensor
    pretrained_bank: torch.Tensor


def views_of(run) -> Views:
    from redkit.references.linear_probe import frozen_features

    h, _, domains = run.split_tensors("train")
    texts = [ex.question for ex in run.splits["train"]]
    return Views(h.to(run.device), domains.to(run.device), frozen_features(run, "train", texts).to(run.device))


def composition_scores(
    composed,
    h: torch.Tensor,
    pretrained: torch.Tensor,
    views: Views | None,
    stats: dict | None = None,
    chunk: int | None = 2048,
    modules=None,
) -> dict[str, torch.Tensor]:
    """{score: (N,)} of one composition's output on queries with tuned features h (N, d) and pretrained
    ones (N, d'): score_table's, the three nearest-neighbour scores, and `views` where `stats` (the
    standardising statistics chosen on val) are given. knn_domain needs the router's weights. Without `views` (a
    run of the replay-free recipe keeps no training feature to compare a query with): score_table's, and where
    `modules` (its ModuleSet) are given and the composition routes, the owners' scores (and `owners`, with
    `stats`)."""
    if views is None:
        scores = score_table(composed.probs, composed.weights)
        if modules is not None and composed.weights is not None:
            try:
                scores |= owner_scores(modules, h, composed.weights)
            except MissingModule:  # a run whose owners sent no density (built before they did)
                return scores
            if stats is not None:
                scores[OWNERS] = standardised_sum(scores, stats)
        return scores
    scores = score_table(composed.probs, composed.weights, h, views.bank, chunk)
    scores["knn_pretrained"] = nearest_similarity(pretrained, views.pretrained_bank, chunk)
    if composed.weights is not None:
        domains = composed.weights.argmax(dim=-1)
        scores["knn_domain"] = nearest_in_domain(h, domains, views.bank, views.bank_domains, chunk)
        if stats is not None:
            scores["views"] = standardised_sum(scores, stats)
    return scores


def _scored(
    run, modules, names: list[str], split: str, examples: list | None, oos_split: str, views: Views | None
) -> dict:
    """{name: (in-scope scores {score: (N,)}, correct (N,), OOS scores {score: (M,)})} of one split
    (without `views`: its standardising statistics come from val's in-scope scores)."""
    from redkit.references.linear_probe import frozen_features

    texts = run.oos_texts[oos_split]
    h_in = run.features(split, examples).to(run.device)
    h_out = run.text_features(oos_split, texts).to(run.device)
    f_in = f_out = None  # the pretrained backbone's features: only the nearest-neighbour scores read them
    if views is not None:
        f_in = frozen_features(run, split, [ex.question for ex in examples]).to(run.device)
        f_out = frozen_features(run, oos_split, texts).to(run.device)
    truth = run.classes(examples).numpy()
    out = {}
    for name in names:
        composed_in = compose(name, modules, h_in, torch.zeros(len(h_in), dtype=torch.long, device=run.device))
        composed_out = compose(name, modules, h_out, torch.zeros(len(h_out), dtype=torch.long, device=run.device))
        owners = modules if views is None else None  # a replay-free run: what its owners sent
        scores_in = composition_scores(composed_in, h_in, f_in, views, modules=owners)
        scores_out = composition_scores(composed_out, h_out, f_out, views, modules=owners)
        correct = composed_in.probs.argmax(dim=-1).cpu().numpy() == truth
        out[name] = (scores_in, correct, scores_out)
    if run.config.references and run.bundle is None:
        from redkit.references import REFERENCES

        for name in run.config.references:
            probs_in = REFERENCES[name].probs(run, split, [ex.question for ex in examples])
            probs_out = REFERENCES[name].probs(run, oos_split, texts)
            correct = probs_in.argmax(dim=-1).cpu().numpy() == truth
            out[name] = (score_table(probs_in, None), correct, score_table(probs_out, None))
    return out


def _with_sums(scored: dict, stats: dict) -> dict:
    """Add the `views` or `owners` score (with val's standardising `stats` per composition) where it applies."""
    for name, (scores_in, _, scores_out) in scored.items():
        if name in stats:
            summed = OWNERS if OWNER_SCORES[0] in stats[name] else "views"
            scores_in[summed] = standardised_sum(scores_in, stats[name])
            scores_out[summed] = standardised_sum(scores_out, stats[name])
    return scored


def owners_stats(scores_in: dict, correct, scores_out: dict) -> dict[str, tuple[float, float]]:
    """`owners`' standardising statistics from val: each of density and ridge by its in-scope mean and sd, the
    ridge's sd divided by its weight w, the w of RIDGE_WEIGHTS whose sum, thresholded as Larson et al. do, is the
    most accurate on val's in-scope and OOS queries pooled."""
    base = standardising_stats(scores_in, OWNER_SCORES)
    best = None
    for weight in RIDGE_WEIGHTS:
        stats = {"density": base["density"], "ridge": (base["ridge"][0], base["ridge"][1] / weight)}
        s_in, s_out = (standardised_sum(s, stats).cpu().numpy() for s in (scores_in, scores_out))
        objective = pooled_accuracy(choose_threshold(s_in, correct, s_out), s_in, correct, s_out)
        if best is None or objective > best[0]:
            best = (objective, stats)
    return best[1]


def _numpy(scored: dict) -> dict:
    return {
        name: ({k: v.cpu().numpy() for k, v in si.items()}, correct, {k: v.cpu().numpy() for k, v in so.items()})
        for name, (si, correct, so) in scored.items()
    }


def evaluate_oos(run, modules, names: list[str]) -> dict:
    """{"chosen": {name: {score, threshold, val: metrics}}, "test": {name: {score: metrics}},
    "curves": {name: test trade-off of the chosen score}}; {} where the run has no OOS validation set."""
    if "oos_val" not in run.oos_texts:
        return {}
    names = [n for n in names if n not in NEEDS_DOMAIN]
    # a replay-free run's scores come from what its owners sent: the nearest-neighbour ones would keep every
    # domain's training features (in the run, and in its bundle)
    views = None if is_replay_free(run.config) else views_of(run)
    val = _scored(run, modules, names, "val", run.splits["val"], "oos_val", views)
    stats = {
        name: standardising_stats(scores_in) for name, (scores_in, _, _) in val.items() if "knn_domain" in scores_in
    } | {name: owners_stats(*scored) for name, scored in val.items() if OWNER_SCORES[0] in scored[0]}
    val = _numpy(_with_sums(val, stats))
    chosen = {}
    for name, (scores_in, correct, scores_out) in val.items():
        best = None
        for score in scores_in:
            tau = choose_threshold(scores_in[score], correct, scores_out[score])
            objective = pooled_accuracy(tau, scores_in[score], correct, scores_out[score])
            if best is None or objective > best[0]:
                best = (objective, score, tau)
        _, score, tau = best
        chosen[name] = {
            "score": score,
            "threshold": tau,
            **({"stats": stats[name]} if score in ("views", OWNERS) else {}),
            "val": oos_metrics(tau, scores_in[score], correct, scores_out[score]),
        }
    results = {"chosen": chosen, "test": {}, "curves": {}}
    if "test" in run.splits and "oos_test" in run.oos_texts:
        test = _numpy(_with_sums(_scored(run, modules, names, "test", run.splits["test"], "oos_test", views), stats))
        for name, (scores_in, correct, scores_out) in test.items():
            tau = chosen[name]["threshold"]
            results["test"][name] = oos_metrics(
                tau, scores_in[chosen[name]["score"]], correct, scores_out[chosen[name]["score"]]
            )
            results["test"][name]["score"] = chosen[name]["score"]
            results["curves"][name] = tradeoff_curve(
                scores_in[chosen[name]["score"]], correct, scores_out[chosen[name]["score"]]
            )
    if run.bundle is None:
        write_json(
            Path(run.dir) / OOS_FILE,
            {name: {k: c[k] for k in ("score", "threshold", "stats") if k in c} for name, c in chosen.items()},
        )
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
        (line,) = ax.plot(curve["oos_recall"], curve["in_scope_accuracy"], label=name, linewidth=1.2)
        ax.plot([point["oos_recall"]], [point["in_scope_accuracy"]], "o", color=line.get_color(), markersize=4)
    ax.set_xlabel("OOS recall (test)")
    ax.set_ylabel("in-scope accuracy (test)")
    ax.set_ylim(0.85, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("oos-threshold trade-off (dot: threshold chosen on val)")
    return save_figure(fig, directory / "figures" / "oos_tradeoff.png")
