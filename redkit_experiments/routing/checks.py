"""Input validation shared by the metrics: one clear line (RedkitError) for bad input."""

import torch

from redkit.errors import RedkitError


def check_probs(alpha: torch.Tensor, name: str = "alpha", atol: float = 1e-3) -> torch.Tensor:
    """α must be an (N, K) matrix of probabilities: finite, ≥ 0, rows summing to 1."""
    if not isinstance(alpha, torch.Tensor) or alpha.dim() != 2:
        shape = tuple(alpha.shape) if isinstance(alpha, torch.Tensor) else type(alpha).__name__
        raise RedkitError(f"{name} must be an (N, K) tensor of router probabilities, got {shape}")
    if alpha.shape[0] == 0 or alpha.shape[1] < 2:
        raise RedkitError(f"{name} must have at least one row and two experts, got shape {tuple(alpha.shape)}")
    alpha = alpha.float()
    low, sums = alpha.min(), alpha.sum(dim=1)  # two passes: NaN and inf show in the sums
    if not torch.isfinite(sums).all():
        raise RedkitError(f"{name} is not a probability matrix: it holds NaN or inf")
    if low < 0:
        raise RedkitError(
            f"{name} is not a probability matrix: it has negative entries (min {low.item():.4g}); "
            "pass softmax(logits), not logits"
        )
    worst = (sums - 1).abs().max().item()
    if worst > atol:
        raise RedkitError(
            f"{name} is not a probability matrix: a row's sum is off 1 by {worst:.4g}; pass softmax(logits), not logits"
        )
    return alpha


def check_rows(n: int, **tensors: torch.Tensor | None) -> None:
    """Every given tensor (None: not given) has n rows, as α has."""
    for name, t in tensors.items():
        if t is None:
            continue
        if t.shape[0] != n:
            raise RedkitError(f"{name} has {t.shape[0]} rows but alpha has {n}: shapes do not match")


def check_selected(selected: torch.Tensor, n: int, num_experts: int, name: str = "selected") -> torch.Tensor:
    """Top-k expert indices (N, k) (or (N,) for k = 1) within 0..K-1."""
    if selected.dim() == 1:
        selected = selected.unsqueeze(1)
    if selected.dim() != 2 or selected.shape[0] != n:
        raise RedkitError(
            f"{name} must be (N, k) = ({n}, k) expert indices, got {tuple(selected.shape)}: shapes do not match"
        )
    if selected.dtype.is_floating_point:
        raise RedkitError(f"{name} must hold integer expert indices, got {selected.dtype}")
    if selected.numel() and (int(selected.min()) < 0 or int(selected.max()) >= num_experts):
        raise RedkitError(f"{name} holds expert indices outside 0..{num_experts - 1}")
    return selected
