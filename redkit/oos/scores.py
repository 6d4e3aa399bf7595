"""How sure a composition is that a query is one of the run's labels: one score per example,
higher = more in-scope. Pure functions over tensors.

    msp             max_y p(y)                 the top probability (Larson et al.'s oos-threshold score)
    router          max_k α_k                  how sure the router is of one domain (routed compositions)
    product         max_y p(y) · max_k α_k     both must be sure
    knn             cos(h, its nearest training feature)   how close the query lies to anything trained on
                    (Sun et al. 2022's nearest-neighbour score, k = 1, on the run's tuned features)
    knn_domain      cos(h, the nearest training feature *of the domain the router chose*): what the
                    router knows, used: an out-of-scope query is far from the domain it is sent to
    knn_pretrained  cos(f, its nearest training text) in the pretrained (untuned) backbone's embedding
                    f: a second view, one the fine-tune never bent towards the training labels
    views           z(knn_domain) + z(knn_pretrained): both views, each standardised by its mean and
                    spread over the in-scope validation queries (where the threshold is chosen)
    density, ridge, owners   what a replay-free run's owners sent: the routed owner's calibrated density of
                    its adapted features, the ridge's best class score, their weighted standardised sum
                    (redkit/oos/owner_density.py)

The knn scores are not for the references, whose features are their own.
"""

import torch
from torch.nn import functional as F

from redkit.oos.owner_density import OWNER_SCORES, OWNERS

VIEWS = ("knn_domain", "knn_pretrained")  # what `views` adds up
OUTPUT_SCORES = ("msp", "router", "product")  # from a composition's output alone: no training features needed
# from the run's modules alone (the output's, the owners' densities, the router's ridge): what a bundle computes too
MODULE_SCORES = OUTPUT_SCORES + (*OWNER_SCORES, OWNERS)


def _parts(x: torch.Tensor, chunk: int | None) -> tuple[torch.Tensor, ...]:
    """x in row chunks, to bound the (chunk, M) similarity matrix; None: whole (an exported graph, whose
    batch size is symbolic, cannot split by it)."""
    return x.split(chunk) if chunk else (x,)


def nearest_similarity(h: torch.Tensor, bank: torch.Tensor, chunk: int | None = 2048) -> torch.Tensor:
    """(N,) cosine similarity of each row of h (N, d) to its nearest row of bank (M, d)."""
    bank = F.normalize(bank.float(), dim=-1)
    return torch.cat([(F.normalize(part.float(), dim=-1) @ bank.T).max(dim=-1).values for part in _parts(h, chunk)])


def nearest_in_domain(
    h: torch.Tensor,
    domains: torch.Tensor,
    bank: torch.Tensor,
    bank_domains: torch.Tensor,
    chunk: int | None = 2048,
) -> torch.Tensor:
    """(N,) cosine similarity of each row of h (N, d) to its nearest row of bank (M, d) among those of
    its own domain: `domains` (N,) and `bank_domains` (M,) index the same domains."""
    bank = F.normalize(bank.float(), dim=-1)
    out = []
    for part, part_domains in zip(_parts(h, chunk), _parts(domains, chunk)):
        sims = F.normalize(part.float(), dim=-1) @ bank.T  # (n, M)
        out.append(sims.masked_fill(part_domains[:, None] != bank_domains[None, :], -2.0).max(dim=-1).values)
    return torch.cat(out) if out else h.new_zeros(0)


def score_table(
    probs: torch.Tensor,
    weights: torch.Tensor | None,
    h: torch.Tensor | None = None,
    bank: torch.Tensor | None = None,
    chunk: int | None = 2048,
) -> dict[str, torch.Tensor]:
    """{score name: (N,)} of one composition's probs (N, C), expert weights (N, K) or None, and,
    where given, its features h (N, d) against the training features `bank` (M, d)."""
    msp = probs.max(dim=-1).values
    scores = {"msp": msp}
    if weights is not None:
        router = weights.max(dim=-1).values
        scores |= {"router": router, "product": msp * router}
    if h is not None and bank is not None:
        scores["knn"] = nearest_similarity(h, bank, chunk)
    return scores


def standardised_sum(scores: dict[str, torch.Tensor], stats: dict[str, tuple[float, float]]) -> torch.Tensor:
    """Σ_name (scores[name] − mean) / spread, over the names of `stats` {name: (mean, spread)}."""
    return sum((scores[name] - mean) / spread for name, (mean, spread) in stats.items())


def standardising_stats(
    scores: dict[str, torch.Tensor], names: tuple[str, ...] = VIEWS
) -> dict[str, tuple[float, float]]:
    """{name: (mean, standard deviation)} of in-scope scores: what `standardised_sum` divides by."""
    return {
        name: (float(scores[name].float().mean()), float(scores[name].float().std().clamp(min=1e-6))) for name in names
    }
