"""The ridge router: RanPAC's ridge regression onto one-hot class targets (McDonnell et al., NeurIPS 2023:
W = (G + λI)⁻¹ Q), computed from the owners' merged statistics (statistics.py) instead of from their features;
RanPAC's two running sums are already in them:

    G = Σ_i φ_i φ_iᵀ = S + Σ_c n_c μ_c μ_cᵀ        (M, M) the Gram matrix of every owner's random features
    Q = Σ_i φ_i y_iᵀ,   column c = n_c μ_c          (M, C) features summed by class
    W = (G + λ I)⁻¹ Q,  λ = ρ tr(G) / M             class scores φ(h) W, (N, C)

(S the summed within-class scatter, μ_c and n_c the class means and counts). So a router that reads the same
numbers the Gaussian one reads (gaussian.py) fits one linear map per class against every other class's
examples at once, where the Gaussian one models each class alone under one shared covariance; on CLINC150's
val it picks the right owner more often (docs/results/incremental.md, scripts/incremental_red_ablation.py).
λ is relative to the Gram matrix's mean eigenvalue, so one ρ serves any M and any number of examples; RanPAC
picks λ on a held-out fifth of the training data, which no owner holds for the merged sums.
"""

import torch

from redkit.incremental.statistics import ClassStatistics

RIDGE = 1e-2  # ρ, chosen on CLINC150's val among 1e-3, 1e-2, 1e-1 (scripts/incremental_red_ablation.py)


def gram_and_targets(stats: ClassStatistics) -> tuple[torch.Tensor, torch.Tensor]:
    """(G (M, M), Q (M, C)) of every example the statistics summarise, float64."""
    weighted = stats.means * stats.counts[:, None]  # (C, M) n_c μ_c: column c of Q
    return stats.scatter + stats.means.T @ weighted, weighted.T


def ridge_weights(stats: ClassStatistics, relative: float = RIDGE) -> torch.Tensor:
    """(C, M) the ridge's class weights (rows in the statistics' class order), float64: φ(h) @ W.T scores."""
    gram, targets = gram_and_targets(stats)
    system = gram.clone()
    system.diagonal().add_(relative * torch.trace(gram) / len(gram))
    factor, info = torch.linalg.cholesky_ex(system)  # G + λI is positive definite for λ > 0
    if info == 0:
        return torch.cholesky_solve(targets, factor).T
    return torch.linalg.solve(system, targets).T
