"""Replay-free RED: the owners' shares (redkit/incremental/owner.py) assembled into one predictor, with no
data of anyone's and nothing retrained.

    α(h)    = softmax_k  log Σ_{c in domain k} exp(φ(h)·w_c + b_c)     the Gaussian router (gaussian.py) on
                                                                      the random features φ (projection.py)
    p(y|h)  = α_{d(y)}(h) · softmax_{y' in d(y)} R_{d(y)}(h + Δh_{d(y)}(h))_y

Axes: N queries, d hidden size, K owners (domains), C every owner's classes. Owners are laid out in the
order of their names (the merged statistics' order), so the same shares give the same model, the same
tensors, whatever the order they arrived in.
"""

import torch
from torch import nn

from redkit.errors import RedkitError
from redkit.incremental.gaussian import SHRINKAGE, discriminant, domain_scores
from redkit.incremental.owner import OwnerShare, owner_log_probs
from redkit.incremental.projection import RandomProjection
from redkit.incremental.statistics import ClassStatistics, merge


class ReplayFreeRED(nn.Module):
    def __init__(
        self,
        shares: dict[str, OwnerShare],
        projection: RandomProjection,
        statistics: ClassStatistics | None = None,
        shrinkage: float = SHRINKAGE,
    ):
        """`statistics`: the owners' merged statistics, where the caller keeps them as one running sum
        (None: merged here from the shares')."""
        super().__init__()
        self.projection = projection
        self.domains = tuple(sorted(shares))
        stats = statistics or merge({name: share.statistics for name, share in shares.items()})
        # (C,) every owner's classes, owners by name: the statistics put in that order whatever order they
        # were summed in, so that the same owners give the same tensors
        self.labels = tuple(label for name in self.domains for label in shares[name].rows.config.labels)
        if sorted(self.labels) != sorted(stats.labels):
            raise RedkitError("the statistics' classes are not the shares' label rows")
        stats = stats.in_order(self.labels)
        weight, bias = discriminant(stats, shrinkage)
        self.register_buffer("router_weight", weight.float())  # (C, M)
        self.register_buffer("router_bias", bias.float())  # (C,)
        self.register_buffer(
            "class_domains",
            torch.tensor([k for k, name in enumerate(self.domains) for _ in shares[name].rows.config.labels]),
        )  # (C,)
        self.experts = nn.ModuleList(shares[name].expert for name in self.domains)
        self.rows = nn.ModuleList(shares[name].rows for name in self.domains)

    def route(self, h: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, K) log α: the owners' posterior under the shared-covariance Gaussians."""
        x = self.projection(h)  # (N, M)
        scores = domain_scores(x @ self.router_weight.T + self.router_bias, self.class_domains, len(self.domains))
        return torch.log_softmax(scores, dim=-1)

    @torch.no_grad()
    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) -> (log p(y|h) (N, C), α (N, K))."""
        log_alpha = self.route(h)
        within = torch.cat(
            [owner_log_probs(expert, rows, h) for expert, rows in zip(self.experts, self.rows)], dim=1
        )  # (N, C): each owner's classes, its own distribution
        return within + log_alpha[:, self.class_domains], log_alpha.exp()
