"""Load balance and decision quality of a routing, as pure functions over tensors.

    α (N, K)         router probabilities (rows sum to 1)
    selected (N, k)  the experts each decision uses (top-k of α unless a router says otherwise)
    load (K,)        how many decisions each expert receives

Definitions (and where the published SPECTRA monitor differs, which these do not repeat):

    CV        population std(load) / mean(load)
    MaxVio    (max_i load_i - mean load) / mean load        Wang et al. 2024 eq. 4: no absolute value
    Gini      Σ_i (2i - n - 1) x_(i) / (n Σ x), x sorted ascending, i = 1..n      0 at perfect balance
    unused    share of experts with load 0
    over_cap  share of assignments beyond capacity ⌈c N k / K⌉ (what a capacity-c router drops)
    entropy   mean over decisions of -Σ α log α / log K      over the FULL α, in [0, 1]
    top1      mean largest weight; margin: mean (top-1 - top-2) weight
    z_loss    mean logsumexp(logits)^2                       ST-MoE
"""

import math

import torch

from redkit.errors import RedkitError
from redkit_experiments.routing.checks import check_probs, check_rows, check_selected


def expert_load(selected: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(N, k) indices -> (K,) float counts of assignments per expert."""
    return torch.bincount(selected.reshape(-1), minlength=num_experts).double()


def cv(load: torch.Tensor) -> float:
    mean = load.mean()
    return float(load.std(unbiased=False) / mean) if mean > 0 else float("nan")


def max_vio(load: torch.Tensor) -> float:
    mean = load.mean()
    return float((load.max() - mean) / mean) if mean > 0 else float("nan")


def gini(load: torch.Tensor) -> float:
    x = load.double().sort().values
    n = len(x)
    total = x.sum()
    if total <= 0:
        return float("nan")
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(((2 * i - n - 1) * x).sum() / (n * total))


def unused_rate(load: torch.Tensor) -> float:
    return float((load == 0).double().mean())


def capacity(n: int, k: int, num_experts: int, factor: float) -> int:
    """⌈c N k / K⌉ assignments per expert."""
    return math.ceil(factor * n * k / num_experts)


def over_capacity(load: torch.Tensor, n: int, k: int, factor: float) -> float:
    """Share of the N k assignments beyond each expert's capacity ⌈c N k / K⌉."""
    cap = capacity(n, k, len(load), factor)
    return float((load - cap).clamp(min=0).sum() / (n * k))


def batch_loads(selected: torch.Tensor, num_experts: int, batch_size: int) -> torch.Tensor:
    """(N, k) -> (B, K) loads of consecutive batches of `batch_size` decisions (a last partial
    batch is dropped so that every batch has the same mean)."""
    n, k = selected.shape
    batches = n // batch_size
    if batches == 0:
        return expert_load(selected, num_experts).unsqueeze(0)
    sel = selected[: batches * batch_size].reshape(batches, batch_size * k)
    offset = torch.arange(batches, device=sel.device).unsqueeze(1) * num_experts
    return (
        torch.bincount((sel + offset).reshape(-1), minlength=batches * num_experts)
        .reshape(batches, num_experts)
        .double()
    )


def batch_max_vio(loads: torch.Tensor) -> torch.Tensor:
    """(B, K) -> (B,) MaxVio of each batch."""
    mean = loads.mean(dim=1)
    return (loads.max(dim=1).values - mean) / mean


def entropy(alpha: torch.Tensor) -> float:
    """Mean normalised entropy of the full α: 0 one-hot, 1 uniform."""
    plogp = torch.special.xlogy(alpha, alpha)  # 0 log 0 = 0
    return float(-plogp.sum(dim=1).mean() / math.log(alpha.shape[1]))


def z_loss(logits: torch.Tensor) -> float:
    return float(torch.logsumexp(logits.float(), dim=1).pow(2).mean())


def load_metrics(
    selected: torch.Tensor, num_experts: int, capacity_factor: float = 1.25, batch_size: int | None = None
) -> dict:
    """Load balance of the assignments `selected` (N, k)."""
    n, k = selected.shape
    top1, topk = expert_load(selected[:, 0], num_experts), expert_load(selected, num_experts)
    out = {
        "n": n,
        "k": k,
        "experts": num_experts,
        "load_top1": top1.tolist(),
        "load_topk": topk.tolist(),
        "cv": cv(topk),
        "cv_top1": cv(top1),
        "max_vio": max_vio(topk),
        "gini": gini(topk),
        "unused_rate": unused_rate(topk),
        "capacity_factor": capacity_factor,
        "over_capacity": over_capacity(topk, n, k, capacity_factor),
    }
    if batch_size:
        vio = batch_max_vio(batch_loads(selected, num_experts, batch_size))
        out |= {
            "batch_size": batch_size,
            "max_vio_batch_mean": float(vio.mean()),
            "max_vio_batch_max": float(vio.max()),
        }
    return out


def decision_metrics(alpha: torch.Tensor, logits: torch.Tensor | None = None, two: torch.Tensor | None = None) -> dict:
    """Decision quality of α (N, K): entropy, top-1 weight, top-1 − top-2 margin, z-loss.
    `two` (N, ≥2): α's largest weights, in decreasing order, when the caller has them already."""
    two = alpha.topk(2, dim=1).values if two is None else two
    out = {
        "entropy": entropy(alpha),
        "top1_weight": float(two[:, 0].mean()),
        "margin": float((two[:, 0] - two[:, 1]).mean()),
    }
    if logits is not None:
        out["z_loss"] = z_loss(logits)
    return out


def routing_metrics(
    alpha: torch.Tensor,
    k: int = 1,
    selected: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
    capacity_factor: float = 1.25,
    batch_size: int | None = None,
) -> dict:
    """Load and decision metrics of one routing. `selected` defaults to top-k of α."""
    alpha = check_probs(alpha)
    n, num_experts = alpha.shape
    check_rows(n, logits=logits)
    if logits is not None and logits.shape != alpha.shape:
        raise RedkitError(
            f"logits have shape {tuple(logits.shape)} but alpha {tuple(alpha.shape)}: shapes do not match"
        )
    best = alpha.topk(max(k, 2), dim=1)  # one top-k serves the selection and the margin
    selected = best.indices[:, :k] if selected is None else check_selected(selected, n, num_experts)
    return load_metrics(selected, num_experts, capacity_factor, batch_size) | decision_metrics(
        alpha, logits, best.values
    )
