"""Out-of-scope evidence from what a replay-free run's owners sent (`redkit fit --recipe replay-free`): no
training feature of anyone's is kept, only each owner's own Gaussians and the server's summed statistics.

Owner k, on its own data before it leaves (modules/density/<k>):

    z_k(h)    = h + Δh_k(h)                      (d,) the query through k's own residual expert
    ll_k(z)   = max_c log N(z; μ_c, Σ_k)         its nearest class under its Gaussians: its class means of z_k over
                                                 its training queries, its covariance shrunk as the router's (0.2)
    density_k = (ll_k - mean) / sd               calibrated by the mean and sd of ll_k on k's own val: only k can

Stored whitened (Σ_k = L Lᵀ): W = L⁻ᵀ (d, d) and the means m_c = μ_c W (C_k, d), so ll_k = -½ min_c |zW - m_c|²
up to a constant, which the calibration subtracts. The server then reads, for a query routed to owner k = argmax α:

    density   density_k(z_k(h))                 how typical the query is of the owner it is sent to, in that
                                                owner's adapted space (the owners' densities, measured first for
                                                `red_tuned`: scripts/incremental_oos_scores.py)
    ridge     max_c φ(h) W_c                    the ridge's best class score (redkit/incremental/ridge.py), from
                                                the summed statistics the router is built from
    owners    z(density) + w · z(ridge)         both standardised over val's in-scope queries, w chosen on val
                                                (redkit/oos/evaluate.py): the two disagree on different queries

The three are pure functions of tensors and modules, so the run, `redkit predict` and the exported serving graph
compute them with the same code (redkit/bundle/graph.py).
"""

from dataclasses import dataclass

import torch
from torch import nn

from redkit.incremental.gaussian import SHRINKAGE  # towards a scaled identity, as the Gaussian router's
from redkit.incremental.statistics import ClassStatistics
from redkit.modules.layers import MODULES

DENSITY = "density"  # modules/density/<domain>: one owner's Gaussians of its adapted features
OWNER_SCORES = ("density", "ridge")  # what `owners` adds up
OWNERS = "owners"
RIDGE_WEIGHTS = (1.0, 3.0, 10.0)  # w, the ridge's weight in `owners`, chosen on val


def shrunk_covariance(stats: ClassStatistics, shrinkage: float = SHRINKAGE) -> torch.Tensor:
    """(d, d) float64: the statistics' pooled within-class covariance, shrunk towards a scaled identity as the
    Gaussian router's (redkit/incremental/gaussian.py discriminant, whose copy stays there: every study method's
    source hash reads that file)."""
    covariance = stats.scatter / max(float(stats.counts.sum()) - len(stats.labels), 1.0)
    scale = torch.trace(covariance) / len(covariance)
    eye = torch.eye(len(covariance), dtype=covariance.dtype)
    return (1 - shrinkage) * covariance + shrinkage * scale * eye


@dataclass
class OwnerDensityConfig:
    dim: int  # d
    labels: tuple[str, ...] = ()  # the owner's classes, in row order

    def __post_init__(self):
        self.labels = tuple(self.labels)


@MODULES.register(DENSITY)
class OwnerDensity(nn.Module):
    """One owner's class Gaussians of its adapted features and their calibration on its own val."""

    Config = OwnerDensityConfig

    def __init__(self, config: OwnerDensityConfig):
        super().__init__()
        self.config = config
        d, n = config.dim, len(config.labels)
        self.register_buffer("whitening", torch.zeros(d, d))  # (d, d) L⁻ᵀ, Σ = L Lᵀ
        self.register_buffer("means", torch.zeros(n, d))  # (C_k, d) μ_c L⁻ᵀ
        self.register_buffer("calibration", torch.tensor([0.0, 1.0]))  # (2,) mean and sd of ll on own val

    def log_likelihood(self, z: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N,) -½ min_c |z W - m_c|²: the nearest class's log-likelihood, up to a constant."""
        white = z.float() @ self.whitening  # (N, d)
        # |a - b|² expanded: no (N, C_k, d) block, and one matrix product the exporter keeps as one
        squared = (white * white).sum(-1, keepdim=True) - 2 * white @ self.means.T + (self.means**2).sum(-1)
        return -0.5 * squared.amin(dim=-1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N,) calibrated: 0 = typical of own val
        mean, sd = self.calibration[0], self.calibration[1]
        return (self.log_likelihood(z) - mean) / sd

    @classmethod
    @torch.no_grad()
    def of(cls, z: torch.Tensor, y: torch.Tensor, labels: tuple[str, ...], z_val: torch.Tensor) -> "OwnerDensity":
        """From the owner's adapted training features z (N, d), their classes y (N,) indexing `labels`, and its
        adapted val features z_val (N', d), which calibrate it. Solved in float64, kept in float32."""
        stats = ClassStatistics.of(z.double(), y, tuple(labels))
        d = z.shape[1]
        factor = torch.linalg.cholesky(shrunk_covariance(stats))  # L, lower
        whitening = torch.linalg.solve_triangular(factor, torch.eye(d, dtype=torch.float64), upper=False).T
        module = cls(OwnerDensityConfig(d, tuple(labels)))
        module.whitening.copy_(whitening.float())
        module.means.copy_((stats.means @ whitening).float())
        val = module.log_likelihood(z_val).double()
        module.calibration.copy_(torch.tensor([float(val.mean()), float(val.std().clamp(min=1e-6))]))
        return module.eval()


def needs_owners(score: str) -> bool:
    """Whether `score` reads the owners' densities or the router's ridge (not the composition's output alone)."""
    return score in OWNER_SCORES or score == OWNERS


@torch.no_grad()
def owner_scores(modules, h: torch.Tensor, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
    """{density, ridge: (N,)} of queries with features h (N, d) routed by α (N, K), from a run's modules
    (redkit.compositions.ModuleSet: the residual experts, each domain's density, the router's ridge). Raises
    MissingModule where the run has no density (a pooled run, or one from before densities were sent)."""
    densities = [modules.density(domain) for domain in modules.run.space.domains]
    hidden = modules.owner_views(h)  # (N, K, d) every owner's adapted view: h + Δh_k(h), or its tuned top's output
    each = torch.stack([density(hidden[:, k]) for k, density in enumerate(densities)], dim=1)  # (N, K)
    routed = each.gather(1, alpha.argmax(dim=-1, keepdim=True)).squeeze(1)  # (N,) the owner it is sent to
    return {"density": routed, "ridge": modules.router().ridge_scores(h).amax(dim=-1)}
