"""Routing by the owners' own evidence: does what each owner's tuned expert knows help choose the owner?

    python scripts/incremental_expert_routing.py runs/rf-d0-s0 --out runs/expert-routing-d0-s0.json

Trains `red_tuned` through every step of a study's stream as the study does (its cache, nothing encoded again).
Each owner k, on its own data alone before it leaves (replay-free: nothing of another owner's), fits

    A_k   Gaussians of its training queries' pooled features through its own tuned top layers, z_k(x) (d,):
          its class means and its covariance, shrunk as the Gaussian router's (0.2)
    P_k   the same of its frozen pretrained features h(x) (d,)

and measures both on its own val (mean and sd: a calibration only it can make). Then, for every val and test
query and every owner k:

    density                        ll_k(x)  = max_c log A_k,c(z_k(x))                 k's tuned view
    density, calibrated            (ll_k(x) - mean of ll_k on k's val) / its sd
    pretrained density             ll0_k(x) = max_c log P_k,c(h(x))                   the frozen view
    likelihood ratio (calibrated)  ll_k(x) - ll0_k(x): how much k's tuning concentrates the query, as TPL's
                                   task-id score against the pretrained background (calibrated on k's val)

each as a router alone (the owner of the largest), and beside red_tuned's ridge (an owner's score: its best
class's): the owner of the largest ridge_k(x) + β e_k(x), over every owner or over the ridge's best two or three
(a second look), β chosen on val among 0 (the ridge alone) and seven weights. The routed owner's expert answers (red_tuned's hard routing). Evaluation only:
every choice on val; test classes read to score, as the study reads them.
"""

import torch

from redkit.atomic import write_json
from redkit.incremental.statistics import ClassStatistics
from redkit.provenance import provenance
from redkit_experiments.incremental.directory import open_study, study_arguments
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.methods.finetune import batched_scores

SHRINKAGE = 0.2  # as the Gaussian router's (redkit/incremental/gaussian.py)
BETAS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
SCOPES = {"every owner": None, "the ridge's best 2": 2, "the ridge's best 3": 3}
ALONE = ("ridge", "density", "density, calibrated", "pretrained density", "likelihood ratio, calibrated")
BESIDE_THE_RIDGE = ("density, calibrated", "pretrained density", "likelihood ratio, calibrated")


@torch.no_grad()
def adapted(tuned, name: str, examples) -> torch.Tensor:
    """(N, d) float64: `examples` through owner `name`'s tuned top layers, pooled."""
    tuned.backbone.load_top_state_dict(tuned.experts[name].top)
    tuned.backbone.eval()
    features = batched_scores(lambda b: tuned.backbone(*b.batch(tuned.setting.device)), examples, tuned.setting.dim)
    return features.double()


def gaussians(z: torch.Tensor, local: torch.Tensor, labels: tuple) -> torch.distributions.MultivariateNormal:
    """An owner's class Gaussians of its own features z (N, d): its class means, its covariance shrunk."""
    stats = ClassStatistics.of(z, local, labels)
    covariance = stats.scatter / (float(stats.counts.sum()) - len(labels))
    scale = torch.trace(covariance) / len(covariance)
    covariance = (1 - SHRINKAGE) * covariance + SHRINKAGE * scale * torch.eye(len(covariance), dtype=torch.float64)
    return torch.distributions.MultivariateNormal(stats.means, covariance)


def nearest(density: torch.distributions.MultivariateNormal, z: torch.Tensor) -> torch.Tensor:
    """(N,) each row of z (N, d)'s log-likelihood under its nearest class."""
    return torch.cat([density.log_prob(block[:, None, :]).amax(-1) for block in z.split(2048)])


class Owner:
    """What owner k keeps of its own data for routing: its two densities and its val's calibration of them."""

    def __init__(self, tuned, step, class_names):
        labels = tuple(class_names[c] for c in step.classes)
        local = step.local(step.train.classes)
        self.tuned_view = gaussians(adapted(tuned, step.name, step.train), local, labels)
        self.pretrained_view = gaussians(step.train.features.double(), local, labels)
        val_ll = nearest(self.tuned_view, adapted(tuned, step.name, step.val))
        val_ratio = val_ll - nearest(self.pretrained_view, step.val.features.double())
        self.ll_mean, self.ll_sd = float(val_ll.mean()), float(val_ll.std())
        self.ratio_mean, self.ratio_sd = float(val_ratio.mean()), float(val_ratio.std())


@torch.no_grad()
def evidence(tuned, owners: dict[str, Owner], queries) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Each kind of evidence, (N, K) over the owners (by name), and each owner's answer (N, K) (stream classes)."""
    ridge = tuned.ridge_scores(queries)  # (N, C_seen), classes owner after owner
    by_kind = {"ridge": torch.stack([ridge[:, tuned.class_owner == k].amax(-1) for k in range(len(owners))], 1)}
    columns = {kind: [] for kind in ALONE[1:]}
    answers = []
    for name, owner in owners.items():
        z = adapted(tuned, name, queries)  # (N, d)
        ll, ll0 = nearest(owner.tuned_view, z), nearest(owner.pretrained_view, queries.features.double())
        columns["density"].append(ll)
        columns["density, calibrated"].append((ll - owner.ll_mean) / owner.ll_sd)
        columns["pretrained density"].append(ll0)
        columns["likelihood ratio, calibrated"].append((ll - ll0 - owner.ratio_mean) / owner.ratio_sd)
        expert = tuned.experts[name]
        answers.append(expert.classes[expert.classifier(z.float()).argmax(-1)])
    return by_kind | {kind: torch.stack(c, 1).double() for kind, c in columns.items()}, torch.stack(answers, 1)


def route(e: dict[str, torch.Tensor], kind: str, beta: float | None = None, scope: int | None = None) -> torch.Tensor:
    """(N,) the owner each query goes to: by `kind` alone, or by the ridge + β `kind` among the ridge's best
    `scope` owners (None: every owner)."""
    if beta is None:
        return e[kind].argmax(-1)
    score = e["ridge"] + beta * e[kind]
    if scope is None:
        return score.argmax(-1)
    top = e["ridge"].topk(scope, dim=-1).indices  # (N, scope)
    return top.gather(1, score.gather(1, top).argmax(-1, keepdim=True)).squeeze(1)


def main() -> None:
    args = study_arguments(__doc__.splitlines()[0]).parse_args()
    context = open_study(args.study)
    stream, setting = context.stream, context.setting
    tuned = METHODS["red_tuned"](setting)
    owners = {}
    for t in range(len(stream.steps)):
        step = context.step_data(t)
        tuned.learn(step)
        owners[step.name] = Owner(tuned, step, setting.class_names)
    owners = {name: owners[name] for name in tuned.owners}  # by name, as the ridge's owners
    label = stream.label_of_class()
    owner_of_class = tuned.class_owner.new_full((len(stream.classes),), -1)
    for k, name in enumerate(tuned.owners):
        owner_of_class[tuned.experts[name].classes] = k

    splits = {}
    for split in ("val", "test"):
        rows = stream.rows(split, range(len(stream.steps)))
        e, answers = evidence(tuned, owners, context.queries(split, rows))
        classes = stream.class_of[split][rows]  # (N,)
        splits[split] = (e, answers, owner_of_class[classes], label[classes])

    def scored(routed_of) -> dict:
        out = {}
        for split, (e, answers, true_owner, true_label) in splits.items():
            routed = routed_of(e)
            answer = answers.gather(1, routed[:, None]).squeeze(1)
            out[split] = {
                "routing": float((routed == true_owner).double().mean()),
                "accuracy": float((label[answer] == true_label).double().mean()),
            }
        return out

    figures = {"study": str(args.study), "alone": {}, "beside the ridge": {}}
    for kind in ALONE:
        figures["alone"][kind] = scored(lambda e, kind=kind: route(e, kind))
    for kind in BESIDE_THE_RIDGE:
        for scope_name, scope in SCOPES.items():
            grid = {beta: scored(lambda e, b=beta, k=kind, s=scope: route(e, k, b, s)) for beta in BETAS}
            beta = max(BETAS, key=lambda b: (grid[b]["val"]["accuracy"], -b))  # ties: the smaller weight
            figures["beside the ridge"][f"{kind}, {scope_name}"] = {"beta": beta, **grid[beta], "grid": grid}
    for group in ("alone", "beside the ridge"):
        for name, entry in figures[group].items():
            v, t = entry["val"], entry["test"]
            chosen = f" (β {entry['beta']:g})" if "beta" in entry else ""
            print(
                f"{name + chosen:58s} val routing {v['routing']:.4f} accuracy {v['accuracy']:.4f}   "
                f"test routing {t['routing']:.4f} accuracy {t['accuracy']:.4f}"
            )
    figures["provenance"] = provenance()
    write_json(args.out, figures)


if __name__ == "__main__":
    main()
