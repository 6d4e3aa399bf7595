"""Prototype methods on the frozen pretrained features: nothing is trained, each step adds its classes'
statistics (no example is kept).

    ncm        nearest class mean, by cosine (the SEQ* / SimpleCIL baseline: a frozen backbone, class prototypes)
    gaussian   a Gaussian per class with one shared covariance on RanPAC's random features φ(h)
               (FeCAM, Goswami et al. 2023; RanPAC, McDonnell et al. 2023): the class means and the summed
               within-class scatter, which add up exactly from step to step
"""

import torch
from torch.nn import functional as F

from redkit.incremental.gaussian import discriminant
from redkit.incremental.statistics import ClassStatistics, merge
from redkit_experiments.incremental.methods.base import Kept, Method, register_method


@register_method("ncm")
class NearestClassMean(Method):
    keeps = "class means"

    def __init__(self, context):
        super().__init__(context)
        self.means = torch.zeros(len(context.stream.classes), context.dim)  # (C, d): a row once its class arrives

    def learn(self, t: int) -> None:
        rows = self.context.stream.rows("train", [t])
        h, y = self.context.features["train"][rows], self.context.stream.class_of["train"][rows]
        for c in self.context.stream.steps[t].classes:
            self.means[c] = h[y == c].mean(dim=0)

    @torch.no_grad()
    def scores(self, split: str, rows: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.context.features[split][rows], dim=-1) @ F.normalize(self.means, dim=-1).T

    def kept(self) -> Kept:
        seen = int((self.means.abs().sum(dim=1) > 0).sum())
        return Kept(statistics_bytes=seen * self.context.dim * self.means.element_size())


@register_method("gaussian")
class SharedCovarianceGaussian(Method):
    keeps = "class means + summed scatter (random features)"

    def __init__(self, context):
        super().__init__(context)
        self.statistics: ClassStatistics | None = None  # every class so far: means, counts, one summed scatter

    def learn(self, t: int) -> None:
        step = self.context.stream.steps[t]
        rows = self.context.stream.rows("train", [t])
        y = self.context.stream.class_of["train"][rows]
        local = torch.searchsorted(torch.tensor(step.classes), y)  # class index within the step
        x = self.context.projection(self.context.features["train"][rows].double())
        new = ClassStatistics.of(x, local, tuple(str(c) for c in step.classes))
        self.statistics = new if self.statistics is None else merge({"earlier": self.statistics, "new": new})
        weight, bias = discriminant(self.statistics, self.context.config.shrinkage)
        self.weight = torch.zeros(len(self.context.stream.classes), weight.shape[1], dtype=torch.float64)
        self.bias = torch.full((len(self.context.stream.classes),), float("-inf"), dtype=torch.float64)
        columns = torch.tensor([int(c) for c in self.statistics.labels])
        self.weight[columns], self.bias[columns] = weight, bias

    @torch.no_grad()
    def scores(self, split: str, rows: torch.Tensor) -> torch.Tensor:
        return self.context.projection(self.context.features[split][rows].double()) @ self.weight.T + self.bias

    def kept(self) -> Kept:
        return Kept(statistics_bytes=self.statistics.nbytes() if self.statistics is not None else 0)
