"""Replay-free RED piece by piece: each router alone, each kind of expert alone with the true domain, and every
pairing, on val (where the choices are made) and test, after the last step of a study's stream.

    python scripts/incremental_red_ablation.py runs/rf-d0-s0 --out runs/red-ablation-d0s0.json

Reads the study directory's settings and cache (nothing encoded again), trains `red` and `red_tuned` through
every step as the study does (redkit_experiments/incremental/methods), then scores every val and test query of
the stream with each owner's expert, so that any routing can be paired with any expert:

    routers   red's Gaussian (soft: RED as it is; hard: one owner), the ridge over random features of the pooled
              features alone or of red_tuned's router features (the pooled features and the frozen layers' last
              states), at M in (2,048, 4,096, 10,000) and ρ in (1e-3, 1e-2, 1e-1) (redkit/incremental/ridge.py),
              the true domain
    experts   red's residual expert on the frozen features, red_tuned's tuned top layers
    evidence  a second look: between the ridge's two best owners, the one whose ridge score plus β times its
              expert's confidence (max log-probability) is higher; β chosen on val

Evaluation only: it reads the test classes to score, as the study does, and chooses on val.
"""

import json

import torch

from redkit.atomic import write_json
from redkit.incremental.projection import ProjectionConfig, RandomProjection
from redkit.incremental.ridge import ridge_weights
from redkit.incremental.statistics import ClassStatistics, merge
from redkit.provenance import provenance
from redkit_experiments.incremental.directory import open_study, study_arguments
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.methods.red_tuned import router_features
from redkit_experiments.incremental.oos_operating_points import read_at_both
from redkit_experiments.incremental.owner_evidence import adapted, gaussians, nearest
from redkit_experiments.incremental.study import StudyContext

WIDTHS = (2048, 4096, 10_000)  # 10,000: RanPAC's
INPUTS = {  # what the ridge reads: (N, width) from a split's examples
    "pooled": lambda examples: examples.features.double(),
    "pooled + lower": router_features,  # red_tuned's
}
RIDGES = (1e-3, 1e-2, 1e-1)
BETAS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)


def router_statistics(context: StudyContext, features, order: tuple[int, ...]) -> dict:
    """Per M of WIDTHS: the projection φ and every owner's statistics of φ(features(examples)), merged, classes in
    `order` (stream indices): what the ridge is solved from. Each step's features are computed once for every M."""
    setting, stream = context.setting, context.stream
    projections, totals = {}, dict.fromkeys(WIDTHS)  # one running sum per M: (M, M) scatters add up fast
    for t in range(len(stream.steps)):
        step = context.step_data(t)
        x = features(step.train)  # (N_t, input width)
        labels = tuple(setting.class_names[c] for c in step.classes)
        for width in WIDTHS:
            if width not in projections:
                projections[width] = RandomProjection(ProjectionConfig(x.shape[1], width, seed=context.config.seed))
            new = ClassStatistics.of(projections[width](x), step.local(step.train.classes), labels)
            totals[width] = new if totals[width] is None else merge({"earlier": totals[width], "new": new})
    names = tuple(setting.class_names[c] for c in order)
    return {width: (projections[width], totals[width].in_order(names)) for width in WIDTHS}


def owner_densities(context: StudyContext, tuned) -> dict[str, torch.distributions.MultivariateNormal]:
    """Each owner's Gaussians of its own adapted training features: its class means, its own covariance (shrunk)."""
    densities = {}
    for t in range(len(context.stream.steps)):
        step = context.step_data(t)
        labels = tuple(context.setting.class_names[c] for c in step.classes)
        densities[step.name] = gaussians(adapted(tuned, step.name, step.train), step.local(step.train.classes), labels)
    return densities


@torch.no_grad()
def query_scores(context: StudyContext, tuned, densities: dict, split: str, rows=None) -> tuple[dict, torch.Tensor]:
    """Each in-scope score of `split`'s queries under red_tuned ((N,) each), and its predicted classes (N,)."""
    queries = context.queries(split, rows)
    routed = tuned.route(queries)  # (N,)
    log_p = tuned.scores(queries)  # (N, C): the routed owner's classes
    density = torch.empty(len(queries), dtype=torch.float64)
    for k, name in enumerate(tuned.owners):
        idx = (routed == k).nonzero(as_tuple=True)[0]
        if len(idx):
            density[idx] = nearest(densities[name], adapted(tuned, name, queries.subset(idx)))  # (n,)
    ridge = tuned.ridge_scores(queries)  # (N, C_seen)
    scores = {"msp": log_p.exp().amax(-1), "ridge": ridge.amax(-1), "density": density}
    return {k: v.double().numpy() for k, v in scores.items()}, log_p.argmax(-1)


def out_of_scope(context: StudyContext, tuned) -> dict:
    """Larson et al.'s protocol (the study's) and the issue's one-point operating point, per in-scope score."""
    stream, label, all_steps = context.stream, context.stream.label_of_class(), range(len(context.stream.steps))
    densities = owner_densities(context, tuned)
    scored, right = {}, {}
    for split in ("val", "test", "oos_val", "oos_test"):
        rows = stream.rows(split, all_steps) if split in ("val", "test") else None
        scored[split], predicted = query_scores(context, tuned, densities, split, rows)
        if rows is not None:
            right[split] = (label[predicted] == label[stream.class_of[split][rows]]).numpy()
    out = {}
    for score in scored["val"]:
        val = (scored["val"][score], right["val"], scored["oos_val"][score])
        test = (scored["test"][score], right["test"], scored["oos_test"][score])
        out[score] = read_at_both(val, test)
    return out


def main() -> None:
    args = study_arguments(__doc__.splitlines()[0]).parse_args()
    context = open_study(args.study)
    stream, setting = context.stream, context.setting

    red, tuned = METHODS["red"](setting), METHODS["red_tuned"](setting)
    for t in range(len(stream.steps)):
        step = context.step_data(t)
        red.learn(step)
        tuned.learn(step)
    owners = tuned.owners  # by name: red's model lays its owners out the same way
    assert owners == red.model.domains
    order = tuple(int(c) for name in owners for c in tuned.experts[name].classes)  # (C,) owners' classes in turn
    class_owner = tuned.class_owner  # (C,) index into owners
    label = stream.label_of_class()
    all_steps = range(len(stream.steps))

    config = context.config
    figures = {"study": str(args.study), "seed": config.seed, "protocol": config.protocol, "splits": {}}
    columns = torch.tensor(order)
    routers = {}  # (input, M, ρ) -> (φ, ridge weights (C, M)): solved once for both splits
    for name, features in INPUTS.items():
        for width, (projection, stats) in router_statistics(context, features, order).items():
            for ridge in RIDGES:
                routers[name, width, ridge] = projection, ridge_weights(stats, ridge)
    position = torch.empty(len(stream.classes), dtype=torch.long)  # (C,) each stream class's column
    position[columns] = torch.arange(len(columns))
    for split in ("val", "test"):
        rows = stream.rows(split, all_steps)
        queries = context.queries(split, rows)
        truth = stream.class_of[split][rows]  # (N,) stream classes
        true_owner = class_owner[position[truth]]  # (N,)
        h = queries.features
        # every owner's expert on every query: (N, C) log-probabilities within each owner's classes
        within = {
            "residual": torch.cat([red.shares[name].log_probs(h) for name in owners], dim=1),
            "tuned": torch.cat([tuned.expert_log_probs(name, queries) for name in owners], dim=1),
        }

        def accuracy(routed: torch.Tensor, kind: str) -> float:
            """Hard routing: the routed owner's top class, right by label."""
            scores = within[kind].masked_fill(class_owner[None, :] != routed[:, None], float("-inf"))
            return float((label[columns[scores.argmax(-1)]] == label[truth]).double().mean())

        def routed_right(routed: torch.Tensor) -> float:
            return float((routed == true_owner).double().mean())

        out = {"queries": len(rows)}
        gaussian_alpha = red.model.route(h)  # (N, K) log α
        soft = within["residual"] + gaussian_alpha[:, red.model.class_domains]
        out["gaussian"] = {
            "routing": routed_right(gaussian_alpha.argmax(-1)),
            "red (soft, residual)": float((label[columns[soft.argmax(-1)]] == label[truth]).double().mean()),
            "hard, residual": accuracy(gaussian_alpha.argmax(-1), "residual"),
            "hard, tuned": accuracy(gaussian_alpha.argmax(-1), "tuned"),
        }
        out["true domain"] = {"residual": accuracy(true_owner, "residual"), "tuned": accuracy(true_owner, "tuned")}
        out["ridge"] = {}
        inputs = {name: features(queries) for name, features in INPUTS.items()}  # (N, input width) each
        confidence = torch.stack(
            [within["tuned"][:, class_owner == k].amax(-1) for k in range(len(owners))], dim=1
        ).double()  # (N, K) max log p of each owner's expert, for the second look
        for (name, width, ridge), (projection, weight) in routers.items():
            class_scores = torch.cat([projection(block) @ weight.T for block in inputs[name].split(2048)])
            routed = class_owner[class_scores.argmax(-1)]
            entry = {
                "routing": routed_right(routed),
                "residual": accuracy(routed, "residual"),
                "tuned": accuracy(routed, "tuned"),
            }
            # a second look: the two best owners (by their best class's ridge score), and each expert's confidence
            owner_scores = torch.stack(
                [class_scores[:, class_owner == k].amax(-1) for k in range(len(owners))], dim=1
            )  # (N, K)
            top2 = owner_scores.topk(2, dim=-1).indices  # (N, 2)
            entry["second look"] = {}
            for beta in BETAS:
                pick = (owner_scores + beta * confidence).gather(1, top2).argmax(-1)
                routed2 = top2.gather(1, pick[:, None]).squeeze(1)
                entry["second look"][str(beta)] = {
                    "routing": routed_right(routed2),
                    "tuned": accuracy(routed2, "tuned"),
                }
            out["ridge"][f"{name} M{width} rho{ridge:g}"] = entry
        figures["splits"][split] = out
        print(split, json.dumps(out, indent=1), flush=True)
    if "oos_val" in stream.texts:
        figures["oos"] = out_of_scope(context, tuned)
        print("oos", json.dumps(figures["oos"], indent=1), flush=True)
    figures["provenance"] = provenance()
    write_json(args.out, figures)


if __name__ == "__main__":
    main()
