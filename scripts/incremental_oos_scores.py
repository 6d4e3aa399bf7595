"""Out-of-scope queries without replay: which in-scope score, built from what red_tuned's owners send, separates
CLINC150's out-of-scope queries best after the last step of a study's stream?

    python scripts/incremental_oos_scores.py runs/rf-d0-s0 --out runs/oos-scores-d0-s0.json

Trains `red_tuned` through every step as the study does (its cache, nothing encoded again), with each owner's own
evidence (redkit_experiments/incremental/owner_evidence.py: its Gaussians of its tuned and pretrained features,
calibrated on its own val). Every in-scope val and test query goes where red_tuned's ridge sends it, and gets each
score (higher: more in scope):

    maximum softmax probability      the routed owner's expert's (the study's score)
    ridge                            the ridge's best class score
    density                          the routed owner's nearest class's log-likelihood in its tuned space
    density, calibrated              the same, standardised by the owner on its own val
    pretrained density, calibrated   the routed owner's, in the frozen space, standardised on its val
    best owner's density, calibrated the largest calibrated density over every owner
    lower density, calibrated        the routed owner's, of the frozen layers' mean last states, standardised
    energy                           the routed owner's expert's log-sum-exp of its logits (Liu et al. 2020)
    LDA posterior                    the largest class posterior (its log) of a linear discriminant on the
                                     statistics the server already holds for the ridge (the owners' class means
                                     and summed scatter of the router's random features): KLDA's score
                                     (Momeni et al., AAAI 2025) in red_tuned's own random feature space
    A + γ B (+ γ' C)                 two or three of them together, the weights chosen on val
    the three, standardised, summed  density and pretrained density (each calibrated by its owner) + the ridge's
                                     score standardised on the in-scope val: equal weights, nothing chosen

and so does every oos_val and oos_test query. Each score is read at Larson et al.'s threshold and at the issue's
operating point (at most one point of val in-scope accuracy given up), both chosen on val and oos_val, then on
test (redkit_experiments/incremental/oos_operating_points.py); γ and the score the page recommends are chosen by
the val OOS recall at the operating point. Evaluation only: test classes read to score, as the study reads them.
"""

import itertools

import numpy as np
import torch

from redkit.atomic import write_json
from redkit.incremental.gaussian import discriminant
from redkit.provenance import provenance
from redkit_experiments.incremental.directory import open_study, study_arguments
from redkit_experiments.incremental.methods.red_tuned import BATCH, router_features
from redkit_experiments.incremental.oos_operating_points import at_most_one_point, read_at_both
from redkit_experiments.incremental.owner_evidence import evidence, owners_through_the_stream

GAMMAS = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
COMBINATIONS = (  # (A, B, ...): A + γ B + γ' C ..., each weight among GAMMAS
    ("density, calibrated", "pretrained density, calibrated"),
    ("density, calibrated", "maximum softmax probability"),
    ("density, calibrated", "ridge"),
    ("density, calibrated", "LDA posterior"),
    ("density, calibrated", "energy"),
    ("density, calibrated", "lower density, calibrated"),
    ("density, calibrated", "pretrained density, calibrated", "lower density, calibrated"),
    ("density, calibrated", "pretrained density, calibrated", "ridge"),
)


def lda_of(tuned) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (C, M), bias (C,)) of the linear discriminant (redkit/incremental/gaussian.py) of red_tuned's router
    statistics: the server's own numbers, nothing more sent. Solved once, for every split."""
    order = tuple(tuned.setting.class_names[c] for name in tuned.owners for c in tuned.experts[name].classes)
    return discriminant(tuned.statistics.in_order(order))


@torch.no_grad()
def lda_posterior(tuned, lda: tuple[torch.Tensor, torch.Tensor], queries) -> torch.Tensor:
    """(N,) the log of the largest class posterior under the discriminant `lda` (lda_of)."""
    weight, bias = lda
    blocks = torch.arange(len(queries)).split(BATCH)
    phi = [tuned.projection(router_features(queries.subset(b))) for b in blocks]  # (n, M) each
    return torch.cat([torch.log_softmax(x @ weight.T + bias, dim=-1).amax(-1) for x in phi])


def scores_of(e: dict[str, torch.Tensor], routed: torch.Tensor) -> dict[str, np.ndarray]:
    """Every single score (N,) of the queries whose evidence is `e` ((N, K) each), sent to `routed` (N,)."""

    def at_routed(kind: str) -> torch.Tensor:
        return e[kind].gather(1, routed[:, None]).squeeze(1)

    single = {
        "maximum softmax probability": at_routed("confidence"),
        "ridge": e["ridge"].amax(-1),
        "density": at_routed("density"),
        "density, calibrated": at_routed("density, calibrated"),
        "pretrained density, calibrated": at_routed("pretrained density, calibrated"),
        "best owner's density, calibrated": e["density, calibrated"].amax(-1),
        "lower density, calibrated": at_routed("lower density, calibrated"),
        "energy": at_routed("energy"),
    }
    return {name: value.double().numpy() for name, value in single.items()}


def main() -> None:
    args = study_arguments(__doc__.splitlines()[0]).parse_args()
    context = open_study(args.study)
    stream = context.stream
    if "oos_val" not in stream.texts:
        raise SystemExit(f"{args.study}: its stream has no out-of-scope queries (oos_val, oos_test)")
    tuned, owners = owners_through_the_stream(context)
    label, all_steps = stream.label_of_class(), range(len(stream.steps))

    lda = lda_of(tuned)
    scored, right = {}, {}
    for split in ("val", "test", "oos_val", "oos_test"):
        rows = stream.rows(split, all_steps) if split in ("val", "test") else None
        queries = context.queries(split, rows)
        e, answers = evidence(tuned, owners, queries)
        routed = e["ridge"].argmax(-1)  # (N,) red_tuned's routing: the owner of the best class
        scored[split] = scores_of(e, routed) | {"LDA posterior": lda_posterior(tuned, lda, queries).numpy()}
        if rows is not None:
            answer = answers.gather(1, routed[:, None]).squeeze(1)  # (N,) stream classes
            right[split] = (label[answer] == label[stream.class_of[split][rows]]).numpy()

    def both_ways(score) -> tuple[tuple, tuple]:
        """(val, test) as the thresholds read them, for `score`: a function of a split's single scores."""
        val = (score(scored["val"]), right["val"], score(scored["oos_val"]))
        test = (score(scored["test"]), right["test"], score(scored["oos_test"]))
        return val, test

    def val_recall(score) -> float:
        """Val's OOS recall at the operating point chosen on val: what γ and the recommended score are chosen by."""
        val, _ = both_ways(score)
        return at_most_one_point(val, val)["oos_recall"]

    figures = {"study": str(args.study), "in-scope accuracy (test)": float(right["test"].mean()), "scores": {}}
    candidates = {name: (lambda s, name=name: s[name]) for name in scored["val"]}
    ridge_mean, ridge_sd = float(scored["val"]["ridge"].mean()), float(scored["val"]["ridge"].std())
    candidates["the three, standardised, summed"] = lambda s: (
        s["density, calibrated"] + s["pretrained density, calibrated"] + (s["ridge"] - ridge_mean) / ridge_sd
    )
    for first, *others in COMBINATIONS:
        grid = {
            weights: (
                lambda s, first=first, others=others, w=weights: s[first] + sum(g * s[o] for g, o in zip(w, others))
            )
            for weights in itertools.product(GAMMAS, repeat=len(others))
        }
        chosen = max(grid, key=lambda w: (val_recall(grid[w]), -sum(w)))  # ties: the smaller weights
        candidates[" + ".join([first, *(f"{g:g} × {o}" for g, o in zip(chosen, others))])] = grid[chosen]
    for name, score in candidates.items():
        val, test = both_ways(score)
        entry = {"val one point": at_most_one_point(val, val), "test": read_at_both(val, test)}
        figures["scores"][name] = entry
        t = entry["test"]
        print(
            f"{name:70s} AUROC {t['larson']['auroc']:.4f}   Larson {t['larson']['in_scope_accuracy']:.4f} / "
            f"{t['larson']['oos_recall']:.3f}   one point {t['one point']['in_scope_accuracy']:.4f} / "
            f"{t['one point']['oos_recall']:.3f}   (val one point recall {entry['val one point']['oos_recall']:.3f})"
        )
    chosen = max(figures["scores"], key=lambda n: figures["scores"][n]["val one point"]["oos_recall"])
    figures["chosen on val"] = chosen
    print(f"chosen on val: {chosen}")
    figures["provenance"] = provenance()
    write_json(args.out, figures)


if __name__ == "__main__":
    main()
