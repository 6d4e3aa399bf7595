"""Prototype classifiers: each class's mean feature, computed from its own step's train when it arrives and never
changed, and a query scored by its cosine with every prototype (nothing is trained on the prototypes; no example is
kept). The feature is the subclass's `embed`; aper.py's APER embeds through a first-session adapter.

    simplecil   SimpleCIL (Zhou et al., IJCV 2024): the frozen pretrained features (the study's cached pooled
                features). The authors' code (models/simplecil.py, replace_fc): `proto = embedding.mean(0)` of the
                unnormalised features, into a CosineLinear whose σ stays 1: argmax_c cos(h, p_c).

frozen.py's `ncm` computes the same scores on the same features (class means of `examples.features`, cosine), so
`simplecil` is it; ncm can become `PrototypeClassifier` registered under its own name.
"""

import torch
from torch.nn import functional as F

from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, Method, register_method


def class_means(h: torch.Tensor, y: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """(N, D) features, (N,) their classes -> (K, D) the mean feature of each of `classes` (K,)."""
    member = (y.unsqueeze(0) == classes.unsqueeze(1)).to(h.dtype)  # (K, N)
    return (member @ h) / member.sum(dim=1, keepdim=True).clamp(min=1)


def cosine(h: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """(N, D), (C, D) -> (N, C) cosines."""
    return F.normalize(h, dim=-1) @ F.normalize(prototypes, dim=-1).T


class PrototypeClassifier(Method):
    """Class means of `embed(examples)`, scored by cosine; classes not seen yet at -inf."""

    keeps = "class means"

    def __init__(self, setting):
        super().__init__(setting)
        self.prototypes: torch.Tensor | None = None  # (C, D): a row once its class arrives (D: embed's width)
        self.seen = torch.zeros(setting.num_classes, dtype=torch.bool)  # (C,)

    def embed(self, examples: Examples) -> torch.Tensor:
        """(N,) examples -> (N, D) the features the prototypes live in."""
        return examples.features

    def learn(self, step: StepData) -> None:
        h = self.embed(step.train).float()
        if self.prototypes is None:
            self.prototypes = torch.zeros(self.setting.num_classes, h.shape[1])
        classes = torch.tensor(step.classes)
        self.prototypes[classes] = class_means(h, step.train.classes, classes)
        self.seen[classes] = True

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        return cosine(self.embed(queries).float(), self.prototypes).masked_fill(~self.seen, float("-inf"))

    def kept(self) -> Kept:
        if self.prototypes is None:
            return Kept()
        return Kept(statistics_bytes=int(self.seen.sum()) * self.prototypes.shape[1] * self.prototypes.element_size())


@register_method("simplecil")
class SimpleCIL(PrototypeClassifier):
    keeps = "class means (frozen features)"
