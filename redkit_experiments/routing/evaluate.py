"""One trained router (or gate) on one split: its routing, its metrics and the accuracy of the
composition it routes (RED's residual experts for the router, the MoE's full heads for the gate).

Routing and mixing go in chunks of `batch` decisions: the same chunks for every router, so an
expert-choice router (non-causal) picks among `batch` decisions at a time, as it does in training.
"""

from typing import NamedTuple

import torch

from redkit.compositions import MIXTURES, ModuleSet
from redkit.routers import RouterOutput
from redkit.routers.experts import expert_modules, weight_update
from redkit_experiments.routing.metrics import routing_metrics
from redkit_experiments.routing.specialisation import gram, off_diagonal_mean, specialisation_metrics

MIXTURE_OF = {"router": "residual", "gate": "heads"}  # what each role's weights mix
COMPOSITION_OF = {"router": "red", "gate": "moe"}


@torch.no_grad()
def route_and_mix(modules: ModuleSet, role: str, h: torch.Tensor, batch: int) -> tuple[RouterOutput, torch.Tensor]:
    """(routing of every row of h, predicted classes (N,)), chunk by chunk."""
    router = getattr(modules, role)().eval()
    mixture = MIXTURES[MIXTURE_OF[role]]
    parts, preds = [], []
    for first in range(0, len(h), batch):
        x = h[first : first + batch]
        out = router.route(x)
        parts.append(out)
        preds.append(mixture.mix(modules, x, mixture.outputs(modules, x), out.weights).argmax(dim=-1).cpu())
    joined = RouterOutput(
        *(
            torch.cat([getattr(p, f) for p in parts]) if f != "aux_loss" else parts[0].aux_loss
            for f in RouterOutput._fields
        )
    )
    return joined, torch.cat(preds)


class Evaluation(NamedTuple):
    metrics: dict  # routing metrics, accuracy of the composition, active experts
    selected: torch.Tensor  # (N, k) experts chosen per example
    right: torch.Tensor  # (N,) bool: the composition's prediction is the answer


def evaluate_router(run, role: str, split: str, batch: int) -> Evaluation:
    """`run`'s router (role "router") or gate on `split`."""
    h, classes, domains = run.split_tensors(split)
    out, pred = route_and_mix(ModuleSet(run), role, h.to(run.device), batch)
    k = run.space.num_domains
    selected = out.selected.cpu()
    metrics = routing_metrics(out.probs.cpu(), selected=selected, logits=out.logits.cpu(), batch_size=batch)
    metrics |= specialisation_metrics(selected, domains, k, k)
    active = float((out.weights > 0).sum(dim=1).double().mean())
    right = pred == classes
    return Evaluation(
        {
            "composition": COMPOSITION_OF[role],
            "accuracy": float(right.double().mean()),
            "active_experts": active,
            "weight_sum": float(out.weights.sum(dim=1).double().mean()),
        }
        | metrics,
        selected,
        right,
    )


def expert_gram(run, role: str) -> dict:
    """Gram matrix (cosine) of the weight updates of the experts the role weighs."""
    g = gram([weight_update(m) for m in expert_modules(run, role)])
    return {"matrix": g.tolist(), "off_diagonal_mean_abs": off_diagonal_mean(g)}
