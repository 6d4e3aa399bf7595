"""Routing by the owners' own evidence: does what each owner's tuned expert knows help choose the owner?

    python scripts/incremental_expert_routing.py runs/rf-d0-s0 --out runs/expert-routing-d0-s0.json

Trains `red_tuned` through every step of a study's stream as the study does (its cache, nothing encoded again),
with each owner's own evidence (redkit_experiments/incremental/owner_evidence.py: its Gaussians of its tuned and of
its pretrained features, calibrated on its own val): its density, calibrated or not, its pretrained density, and
the likelihood ratio between them (TPL's task-id score against the pretrained background), each as a router alone
(the owner of the largest), and beside red_tuned's ridge (an owner's score: its best class's): the owner of the
largest ridge_k(x) + β e_k(x), over every owner or over the ridge's best two or three (a second look), β chosen on
val among 0 (the ridge alone) and seven weights. The routed owner's expert answers (red_tuned's hard routing).
Evaluation only: every choice on val; test classes read to score, as the study reads them.
"""

import torch

from redkit.atomic import write_json
from redkit.provenance import provenance
from redkit_experiments.incremental.directory import open_study, study_arguments
from redkit_experiments.incremental.owner_evidence import evidence, owners_through_the_stream

BETAS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
SCOPES = {"every owner": None, "the ridge's best 2": 2, "the ridge's best 3": 3}
ALONE = ("ridge", "density", "density, calibrated", "pretrained density", "likelihood ratio, calibrated")
BESIDE_THE_RIDGE = ("density, calibrated", "pretrained density", "likelihood ratio, calibrated")


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
    stream = context.stream
    tuned, owners = owners_through_the_stream(context)
    label = stream.label_of_class()
    owner_of_class = tuned.class_owner.new_full((len(stream.classes),), -1)
    for k, name in enumerate(tuned.owners):
        owner_of_class[tuned.classes[name]] = k

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
