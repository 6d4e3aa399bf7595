"""Training-free routers: built from what the run already has, no router training at all, so an
independently trained expert can be plugged in by adding its vector.

    prototype  e_i = mean pooled feature of expert i's own training domain; s_i = scale · cos(h, e_i);
               the nearest prototype gets weight 1 (FlexOlmo routes independently trained experts so)
    arrow      v_i = top right-singular vector of expert i's weight update (its input direction);
               s_i = |<h, v_i>| (the sign of a singular vector is arbitrary); the top expert gets weight 1
               (Arrow, Ostapenko et al. 2024)

`from_run(run, role)` builds one for RED's router (role "router": the residual experts) or the MoE
gate ("gate": the full heads). `probs` = softmax(s) is what the decision metrics read.
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.routers.base import RouterBase, RouterOutput, register_router, scatter_weights
from redkit.routers.experts import expert_modules, weight_update


@dataclass
class FreeRouterConfig:
    dim: int
    num_experts: int  # K
    scale: float = 10.0  # prototype: cosine -> logit temperature; arrow: multiplies |<h, v>|


class FreeRouter(RouterBase):
    Config = FreeRouterConfig
    training_free = True

    def __init__(self, config: FreeRouterConfig):
        super().__init__()
        self.config = config
        self.register_buffer("vectors", torch.zeros(config.num_experts, config.dim))  # (K, d)

    def route(self, h: torch.Tensor) -> RouterOutput:
        logits = self(h)
        probs = F.softmax(logits, dim=-1)
        selected = logits.argmax(dim=-1, keepdim=True)
        weights = scatter_weights(
            torch.ones_like(selected, dtype=probs.dtype), selected, self.config.num_experts, False
        )
        return RouterOutput(weights, selected, probs, logits, logits.new_zeros(()))

    @classmethod
    def with_vectors(cls, vectors: torch.Tensor, scale: float = 10.0) -> "FreeRouter":
        router = cls(FreeRouterConfig(dim=vectors.shape[1], num_experts=vectors.shape[0], scale=scale))
        router.vectors.copy_(vectors)
        return router.eval()


@register_router("prototype")
class PrototypeRouter(FreeRouter):
    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K)
        return self.config.scale * F.normalize(h, dim=-1) @ F.normalize(self.vectors, dim=-1).T

    @staticmethod
    def domain_means(h: torch.Tensor, domains: torch.Tensor, num_experts: int) -> torch.Tensor:
        """(N, d), (N,) -> (K, d) mean feature of each domain."""
        sums = torch.zeros(num_experts, h.shape[1], dtype=h.dtype).index_add_(0, domains, h)
        return sums / torch.bincount(domains, minlength=num_experts).clamp(min=1).unsqueeze(1).to(h.dtype)

    @classmethod
    def from_run(cls, run, role: str) -> "PrototypeRouter":
        h, _, domains = run.split_tensors("train")
        return cls.with_vectors(cls.domain_means(h.float(), domains, run.space.num_domains))


@register_router("arrow")
class ArrowRouter(FreeRouter):
    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K)
        return self.config.scale * (h @ self.vectors.T).abs()

    @staticmethod
    def directions(updates: list[torch.Tensor]) -> torch.Tensor:
        """Top right-singular vector of each (out, d) weight update -> (K, d): the top eigenvector of
        uᵀu (d, d), in float64 on u scaled to unit norm (a barely trained expert's tiny entries would
        otherwise crawl through subnormal numbers). An all-zero update (an expert that never
        trained) has no direction: its vector is 0, so it is never chosen over one that has."""
        vectors = []
        for u in updates:
            norm = u.norm()
            if norm == 0:
                vectors.append(torch.zeros(u.shape[1]))
                continue
            u = (u / norm).double()
            vectors.append(torch.linalg.eigh(u.T @ u).eigenvectors[:, -1].float())
        return torch.stack(vectors)

    @classmethod
    def from_run(cls, run, role: str) -> "ArrowRouter":
        return cls.with_vectors(cls.directions([weight_update(m) for m in expert_modules(run, role)]), scale=1.0)
