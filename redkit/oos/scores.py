"""How sure a composition is that a query is one of the run's labels: one score per example,
higher = more in-scope. Pure functions over tensors.

    msp       max_y p(y)                 the top probability (Larson et al.'s oos-threshold score)
    router    max_k α_k                  how sure the router is of one domain (routed compositions)
    product   max_y p(y) · max_k α_k     both must be sure
    knn       cos(h, its nearest training feature)   how close the query lies to anything trained on
                                         (Sun et al. 2022's nearest-neighbour score, k = 1, on the
                                         composition's own features; not for the references, whose
                                         features are their own)
"""

import torch
from torch.nn import functional as F


def nearest_similarity(h: torch.Tensor, bank: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """(N,) cosine similarity of each row of h (N, d) to its nearest row of bank (M, d)."""
    bank = F.normalize(bank.float(), dim=-1)
    return torch.cat([(F.normalize(part.float(), dim=-1) @ bank.T).max(dim=-1).values for part in h.split(chunk)])


def score_table(probs: torch.Tensor, weights: torch.Tensor | None, h: torch.Tensor | None = None,
                bank: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """{score name: (N,)} of one composition's probs (N, C), expert weights (N, K) or None, and,
    where given, its features h (N, d) against the training features `bank` (M, d)."""
    msp = probs.max(dim=-1).values
    scores = {"msp": msp}
    if weights is not None:
        router = weights.max(dim=-1).values
        scores |= {"router": router, "product": msp * router}
    if h is not None and bank is not None:
        scores["knn"] = nearest_similarity(h, bank)
    return scores
