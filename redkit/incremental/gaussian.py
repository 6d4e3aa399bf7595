"""A Gaussian per class with one shared covariance (linear discriminant analysis), built from the owners'
merged statistics (redkit/incremental/statistics.py), never from their data:

    Σ = (1 - λ) S / (N - C) + λ (tr S / ((N - C) d)) I        pooled within-class covariance, shrunk
    log p(h | c) + log π_c = h·w_c + b_c + const               w_c = Σ⁻¹ μ_c,  b_c = -½ μ_cᵀ Σ⁻¹ μ_c + log π_c

so the class scores are one linear layer (C, d) over the features, and a domain's score is the
log-sum-exp of its classes' scores: the domain posterior a replay-free router reads (the quadratic
term hᵀΣ⁻¹h is the same for every class and cancels). λ, the shrinkage towards a scaled identity, keeps
Σ invertible with fewer examples than dimensions and is chosen once, on CLINC150's validation split.
"""

import torch

from redkit.incremental.statistics import ClassStatistics

SHRINKAGE = 0.2  # λ, chosen on CLINC150's val among 0.05, 0.2, 0.5 (scripts/incremental_router_grid.py)


def discriminant(stats: ClassStatistics, shrinkage: float = SHRINKAGE) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (C, d), bias (C,)) of the classes' log-likelihoods plus log priors (by counts), float64."""
    total, classes, dim = float(stats.counts.sum()), len(stats.labels), stats.dim
    covariance = stats.scatter / max(total - classes, 1.0)
    scale = torch.trace(covariance) / dim
    covariance = (1 - shrinkage) * covariance + shrinkage * scale * torch.eye(dim, dtype=covariance.dtype)
    weight = torch.linalg.solve(covariance, stats.means.T).T  # (C, d) Σ⁻¹ μ_c, without forming Σ⁻¹
    bias = -0.5 * (weight * stats.means).sum(dim=1) + torch.log(stats.counts / total)
    return weight, bias


def domain_scores(class_scores: torch.Tensor, class_domains: torch.Tensor, num_domains: int) -> torch.Tensor:
    """(N, C) class scores, (C,) each class's domain -> (N, K) log Σ_{c in domain k} exp(score_c): every class
    with the other domains' classes masked to -inf, then a log-sum-exp written out with each domain's own
    maximum subtracted. No shape depends on the data, so a router built on it exports to ONNX as it is
    (redkit/routers/gaussian.py), and the scores, Gaussian log-likelihoods in the thousands, never overflow
    (ONNX's ReduceLogSumExp, as ONNX Runtime runs it, does not subtract the maximum). A domain with no
    class scores -inf."""
    domains = torch.arange(num_domains, device=class_domains.device)
    outside = class_domains.unsqueeze(0) != domains.unsqueeze(1)  # (K, C)
    masked = class_scores.unsqueeze(1).masked_fill(outside, float("-inf"))  # (N, K, C)
    top = masked.amax(dim=-1, keepdim=True).clamp(min=torch.finfo(class_scores.dtype).min)  # (N, K, 1) finite
    return (masked - top).exp().sum(dim=-1).log() + top.squeeze(-1)
