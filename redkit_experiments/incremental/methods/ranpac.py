"""RanPAC (McDonnell, Gong, Parvaneh, Abbasnejad & van den Hengel, "RanPAC: Random Projections and Pre-trained
Models for Continual Learning", NeurIPS 2023; code github.com/RanPAC/RanPAC @ 012927f, RanPAC.py), here WITHOUT
its first-session adaptation: a frozen random layer on the features, and a ridge regression onto one-hot targets
from two running sums; nothing is trained by gradient.

    h = ReLU(f W_rand)          f = embed(x) (N, d): the frozen features; W_rand (d, M) ~ N(0, 1), from the seed
    G += hᵀh  (M, M)            Q += hᵀY  (M, C), Y one-hot over all C classes of the stream
    W = (G + λI)⁻¹ Q  (M, C)     scores = h W  (N, C): solved at every step, from the sums of every step so far
    λ: each step, among 10^-8 ... 10^8, the one whose ridge fit on the first 80 % of the step's shuffled training
       examples has the least mean squared error on the other 20 % (over all C columns, as F.mse_loss)

Where this departs from RanPAC.py, and why:
- λ's search solves the 17 ridges through one eigendecomposition of the fit split's Gram matrix (the n × n
  one, n ≤ M: (HᵀH + λI)⁻¹HᵀY = Hᵀ(HHᵀ + λI)⁻¹Y) instead of 17 solves of M × M systems: the same predictions
  in exact arithmetic, 17 Cholesky factors of 10,000 × 10,000 per step fewer on 2 CPU cores. In float64, where
  the authors solve in float32 (their solves at λ = 1e-8 on a singular G are not the exact ridge solution).
- float64 sums and solve (Cholesky, LU where the factor fails as at a tiny λ), the authors float32 and LU.
- The shuffle is drawn from the seed and the step (the authors: their DataLoader's).

`embed` is the one place the features come from: RanPAC with its first-session adapter overrides it.
"""

import torch
from torch.nn import functional as F

from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, Method, register_method

WIDTH = 10_000  # M, the authors' (every CIL args file): 8 s a step on CLINC150's domains, 2 CPU cores
RIDGES = tuple(10.0**k for k in range(-8, 9))  # λ's candidates, 1e-8 ... 1e8
FIT_FRACTION = 0.8  # of the step's shuffled training examples, to fit λ's candidates; the rest scores them
BATCH = 2048  # queries scored at once (an (N, M) float64 block)


def ridge_losses(h_fit, y_fit, h_held, y_held) -> torch.Tensor:
    """(17,) RIDGES' held-out MSE of W_λ = (h_fitᵀh_fit + λI)⁻¹ h_fitᵀy_fit for every λ, from one eigendecomposition:
    of h_fit h_fitᵀ (n, n) where n ≤ M (W_λ = h_fitᵀ U (Λ + λ)⁻¹ Uᵀ y_fit), else of h_fitᵀh_fit (M, M)."""
    if len(h_fit) <= h_fit.shape[1]:
        lam, basis = torch.linalg.eigh(h_fit @ h_fit.T)  # (n,), (n, n)
        left, right = h_held @ h_fit.T @ basis, basis.T @ y_fit  # (n_held, n), (n, C)
    else:
        lam, basis = torch.linalg.eigh(h_fit.T @ h_fit)  # (M,), (M, M)
        left, right = h_held @ basis, basis.T @ (h_fit.T @ y_fit)  # (n_held, M), (M, C)
    lam = lam.clamp(min=0)
    return torch.stack([F.mse_loss(left @ (right / (lam + ridge)[:, None]), y_held) for ridge in RIDGES])


@register_method("ranpac")
class RanPAC(Method):
    keeps = "Gram matrix hᵀh + hᵀY (random features)"
    width = WIDTH

    def __init__(self, setting):
        super().__init__(setting)
        generator = torch.Generator().manual_seed(setting.config.seed)
        self.w_rand = torch.randn(setting.dim, self.width, generator=generator).double()  # (d, M), never saved
        self.G = torch.zeros(self.width, self.width, dtype=torch.float64)  # (M, M) Σ hᵀh
        self.Q = torch.zeros(self.width, setting.num_classes, dtype=torch.float64)  # (M, C) Σ hᵀY
        self.seen = torch.zeros(setting.num_classes, dtype=torch.bool)  # (C,)
        self.ridges: list[float] = []  # λ chosen at each step

    def embed(self, examples: Examples) -> torch.Tensor:
        """(N, d) the features the random layer reads: the frozen pooled features."""
        return examples.features

    def learn(self, step: StepData) -> None:
        h = F.relu(self.embed(step.train).double() @ self.w_rand)  # (N, M)
        y = F.one_hot(step.train.classes, self.setting.num_classes).double()  # (N, C)
        self.G += h.T @ h
        self.Q += h.T @ y
        self.seen[list(step.classes)] = True
        ridge = self.choose_ridge(h, y, seed=1000 * self.setting.config.seed + step.t)
        self.ridges.append(ridge)
        system = self.G.clone()
        system.diagonal().add_(ridge)
        factor, info = torch.linalg.cholesky_ex(system)
        self.W = torch.cholesky_solve(self.Q, factor) if info == 0 else torch.linalg.solve(system, self.Q)  # (M, C)

    @staticmethod
    def choose_ridge(h: torch.Tensor, y: torch.Tensor, seed: int) -> float:
        """The authors' λ: fit on the first 80 % of the step's examples shuffled, least MSE on the rest."""
        order = torch.randperm(len(h), generator=torch.Generator().manual_seed(seed))
        h, y, n = h[order], y[order], int(len(h) * FIT_FRACTION)
        return RIDGES[int(ridge_losses(h[:n], y[:n], h[n:], y[n:]).argmin())]  # the first of equals, as np.argmin

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        f = self.embed(queries).double()  # (N, d)
        scores = torch.cat([F.relu(rows @ self.w_rand) @ self.W for rows in f.split(BATCH)])  # (N, C), by blocks
        return scores.masked_fill(~self.seen, float("-inf"))

    def kept(self) -> Kept:
        return Kept(statistics_bytes=self.G.numel() * self.G.element_size() + self.Q.numel() * self.Q.element_size())

    def details(self) -> dict:
        return {"ridge_by_step": self.ridges, "width": self.width}
