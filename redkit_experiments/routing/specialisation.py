"""Specialisation: which experts serve which domains, and how alike the experts are.

affinity (D, K)       share of domain d's decisions whose top-1 expert is i (rows sum to 1)
purity                Σ_i max_d count(d, i) / N: decisions whose expert's majority domain is theirs
routed_accuracy       share of decisions whose top-1 expert was trained on their domain
nmi                   normalised mutual information between routed expert and domain (arithmetic
                      normalisation, as sklearn's normalized_mutual_info_score)
jaccard (K, K)        |S_i ∩ S_j| / |S_i ∪ S_j|, S_i = decisions with expert i among their top-k
coactivation (K, K)   share of decisions with both i and j among their top-k (diagonal: usage)
gram (K, K)           cosine between the experts' flattened weight updates (expert x expert,
                      not token x token as in the published SPECTRA analyzer)
"""

import torch
from sklearn.metrics import mutual_info_score

from redkit.errors import RedkitError
from redkit_experiments.routing.checks import check_selected


def contingency(domains: torch.Tensor, experts: torch.Tensor, num_domains: int, num_experts: int) -> torch.Tensor:
    """(N,), (N,) -> (D, K) counts."""
    if domains.shape != experts.shape:
        raise RedkitError(
            f"domains {tuple(domains.shape)} and routed experts {tuple(experts.shape)}: shapes do not match"
        )
    if domains.numel() and (int(domains.min()) < 0 or int(domains.max()) >= num_domains):
        raise RedkitError(f"domain labels outside 0..{num_domains - 1}")
    flat = domains.long() * num_experts + experts.long()
    return torch.bincount(flat, minlength=num_domains * num_experts).reshape(num_domains, num_experts).double()


def affinity(counts: torch.Tensor) -> torch.Tensor:
    """(D, K) counts -> row-normalised (D, K); an empty domain's row is zero."""
    return counts / counts.sum(dim=1, keepdim=True).clamp(min=1)


def purity(counts: torch.Tensor) -> float:
    return float(counts.max(dim=0).values.sum() / counts.sum())


def routed_accuracy(domains: torch.Tensor, experts: torch.Tensor, expert_domain: torch.Tensor | None = None) -> float:
    """Share of decisions routed to the expert trained on their domain (`expert_domain[i]`: expert
    i's domain; default identity)."""
    own = experts if expert_domain is None else expert_domain[experts]
    return float((own == domains).double().mean())


def _entropy(p: torch.Tensor) -> float:
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def nmi(counts: torch.Tensor) -> float:
    """NMI from the (D, K) contingency table: MI (sklearn) / mean(H(domain), H(expert)); 1 when
    both entropies are 0 (sklearn's convention for two constant labellings)."""
    total = counts.sum()
    h_d, h_e = _entropy(counts.sum(dim=1) / total), _entropy(counts.sum(dim=0) / total)
    if h_d == 0 and h_e == 0:
        return 1.0
    mi = mutual_info_score(None, None, contingency=counts.numpy())
    return float(mi / ((h_d + h_e) / 2)) if h_d + h_e > 0 else 0.0


def intersections(selected: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(N, k) distinct experts per row -> (K, K) |S_i ∩ S_j| (diagonal |S_i|): a count of every
    ordered pair of a row's experts, k^2 bincounts of N (no (N, K) matrix)."""
    k = selected.shape[1]
    pairs = torch.cat([selected[:, a] * num_experts + selected[:, b] for a in range(k) for b in range(k)])
    return torch.bincount(pairs, minlength=num_experts * num_experts).reshape(num_experts, num_experts).double()


def jaccard(inter: torch.Tensor) -> torch.Tensor:
    """(K, K) intersections -> Jaccard; two empty sets give 0."""
    size = inter.diagonal()
    union = size.unsqueeze(0) + size.unsqueeze(1) - inter
    return torch.where(union > 0, inter / union.clamp(min=1), torch.zeros_like(inter))


def coactivation(inter: torch.Tensor, n: int) -> torch.Tensor:
    return inter / n


def gram(updates: list[torch.Tensor]) -> torch.Tensor:
    """Cosine between K flattened weight updates: (K, K), diagonal 1 (0 for an all-zero update)."""
    flat = torch.stack([u.detach().reshape(-1).double() for u in updates])
    flat = flat / flat.norm(dim=1, keepdim=True).clamp(min=1e-12)
    return flat @ flat.T


def off_diagonal_mean(matrix: torch.Tensor, absolute: bool = True) -> float:
    k = matrix.shape[0]
    off = matrix[~torch.eye(k, dtype=torch.bool)]
    return float((off.abs() if absolute else off).mean()) if k > 1 else 0.0


def specialisation_metrics(
    selected: torch.Tensor,
    domains: torch.Tensor,
    num_experts: int,
    num_domains: int,
    expert_domain: torch.Tensor | None = None,
) -> dict:
    """Affinity, purity, routed accuracy, NMI, Jaccard and co-activation of top-k `selected` (N, k)
    against domain labels (N,)."""
    selected = check_selected(selected, len(domains), num_experts)
    counts = contingency(domains, selected[:, 0], num_domains, num_experts)
    inter = intersections(selected, num_experts)
    jac = jaccard(inter)
    return {
        "affinity": affinity(counts).tolist(),
        "purity": purity(counts),
        "routed_accuracy": routed_accuracy(domains, selected[:, 0], expert_domain),
        "nmi": nmi(counts),
        "jaccard": jac.tolist(),
        "jaccard_mean": off_diagonal_mean(jac),
        "coactivation": coactivation(inter, len(domains)).tolist(),
    }
