"""A statistics method on the frozen pretrained features: nothing is trained, each step adds its classes'
statistics (no example is kept). The nearest class mean by cosine, once `ncm` here, is `simplecil`
(prototypes.py; `--method ncm` still names it).

    gaussian   a Gaussian per class with one shared covariance on RanPAC's random features φ(h)
               (FeCAM, Goswami et al. 2023; RanPAC, McDonnell et al. 2023): the class means and the summed
               within-class scatter, which add up exactly from step to step
"""

import torch

from redkit.incremental.gaussian import discriminant
from redkit.incremental.statistics import ClassStatistics, merge
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, Method, register_method


@register_method("gaussian")
class SharedCovarianceGaussian(Method):
    keeps = "class means + summed scatter (random features)"

    def __init__(self, setting):
        super().__init__(setting)
        self.statistics: ClassStatistics | None = None  # every class so far: means, counts, one summed scatter

    def learn(self, step: StepData) -> None:
        x = self.setting.projection(step.train.features.double())
        new = ClassStatistics.of(x, step.local(step.train.classes), tuple(str(c) for c in step.classes))
        self.statistics = new if self.statistics is None else merge({"earlier": self.statistics, "new": new})
        # the classes in the stream's order, whatever order they came in: the same solve, the same bits
        ordered = self.statistics.in_order(tuple(sorted(self.statistics.labels, key=int)))
        weight, bias = discriminant(ordered, self.setting.config.shrinkage)
        self.weight = torch.zeros(self.setting.num_classes, weight.shape[1], dtype=torch.float64)
        self.bias = torch.full((self.setting.num_classes,), float("-inf"), dtype=torch.float64)
        columns = torch.tensor([int(c) for c in ordered.labels])
        self.weight[columns], self.bias[columns] = weight, bias

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        return self.setting.projection(queries.features.double()) @ self.weight.T + self.bias

    def kept(self) -> Kept:
        return Kept(statistics_bytes=self.statistics.nbytes() if self.statistics is not None else 0)
