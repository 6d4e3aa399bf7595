"""How sure a composition is that a query is one of the run's labels: one score per example,
higher = more in-scope. Pure functions over tensors.

    msp       max_y p(y)                 the top probability (Larson et al.'s oos-threshold score)
    router    max_k α_k                  how sure the router is of one domain (routed compositions)
    product   max_y p(y) · max_k α_k     both must be sure
"""

import torch


def score_table(probs: torch.Tensor, weights: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """{score name: (N,)} of one composition's probs (N, C) and expert weights (N, K) or None."""
    msp = probs.max(dim=-1).values
    scores = {"msp": msp}
    if weights is not None:
        router = weights.max(dim=-1).values
        scores |= {"router": router, "product": msp * router}
    return scores
