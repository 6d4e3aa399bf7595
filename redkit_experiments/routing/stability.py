"""Stability of a routing between two checkpoints or two seeds (same decisions, same experts).

agreement    share of decisions whose top-1 expert is the same
saturation   mean |TopK_a ∩ TopK_b| / k                               (OLMoE's router saturation)
kendall_tau  Kendall τ-b between the two expert-usage vectors (scipy): do they rank experts alike
"""

import torch
from scipy import stats

from redkit.errors import RedkitError
from redkit_experiments.routing.metrics import expert_load


def _pair(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise RedkitError(f"the two routings have shapes {tuple(a.shape)} and {tuple(b.shape)}: shapes do not match")


def agreement(selected_a: torch.Tensor, selected_b: torch.Tensor) -> float:
    _pair(selected_a, selected_b)
    return float((selected_a[:, 0] == selected_b[:, 0]).double().mean())


def saturation(selected_a: torch.Tensor, selected_b: torch.Tensor, num_experts: int) -> float:
    _pair(selected_a, selected_b)
    shared = (selected_a.unsqueeze(2) == selected_b.unsqueeze(1)).any(dim=2).sum(dim=1)  # (N,) |TopK_a ∩ TopK_b|
    return float(shared.double().mean() / selected_a.shape[1])


def kendall_tau(load_a: torch.Tensor, load_b: torch.Tensor) -> float:
    """τ-b of the usage ranks; NaN when one usage vector is constant (no ranking to compare)."""
    _pair(load_a, load_b)
    return float(stats.kendalltau(load_a.cpu().numpy(), load_b.cpu().numpy()).statistic)


def stability_metrics(selected_a: torch.Tensor, selected_b: torch.Tensor, num_experts: int) -> dict:
    return {
        "agreement": agreement(selected_a, selected_b),
        "saturation": saturation(selected_a, selected_b, num_experts),
        "kendall_tau": kendall_tau(expert_load(selected_a, num_experts), expert_load(selected_b, num_experts)),
    }
