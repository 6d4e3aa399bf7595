"""First-session adaptation: an adapter (adapter.py) trained on the first step's classes only, then frozen, and
every later step learned without training, in features through it.

    aper         APER with an adapter (Zhou et al., IJCV 2024; RevisitingCIL models/aper_adapter.py): the frozen
                 pretrained feature and the adapted one side by side, h = [h_ptm, h_adapted] (2d, both
                 unnormalised), every class's prototype its mean h over its own step's train, a query scored by
                 cos(h, p_c) over the whole 2d (the dual-branch network's CosineLinear, σ 1).
    ranpac_fsa   RanPAC (McDonnell et al., NeurIPS 2023) with its phase 1: ranpac.py's random features and ridge
                 classifier on the adapted feature alone (RanPAC does not concatenate the pretrained one), the
                 adapter trained on the first step as APER's (the authors' PETL training is the same).

The first step's adapter is trained by adapter.py's `train_adapter` with a cosine head over the first step's classes
(the authors': the same head, over the first task's classes), early-stopped on the first step's val.
"""

import torch

from redkit.errors import RedkitError
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.adapter import adapted_features, frozen_backbone, train_adapter
from redkit_experiments.incremental.methods.base import register_method
from redkit_experiments.incremental.methods.prototypes import PrototypeClassifier
from redkit_experiments.incremental.methods.ranpac import RanPAC


class FirstSession:
    """The adapter of the first step, trained when that step arrives and frozen from then on, and its features."""

    def __init__(self, setting):
        self.setting = setting
        self.backbone = frozen_backbone(setting)
        self.adapter = None
        self.training: dict | None = None  # what its training did (adapter.py: train_adapter)

    def adapt(self, step: StepData) -> None:
        """Trains the adapter on `step` if it is the first; later steps leave it as it is."""
        if self.adapter is None:
            self.adapter, self.training = train_adapter(self.backbone, self.setting, step)

    def __call__(self, examples: Examples) -> torch.Tensor:
        """(N,) examples -> (N, d) pooled features through the backbone with the first step's adapter."""
        if self.adapter is None:
            raise RedkitError("no adapter yet: the first step trains it")
        return adapted_features(self.backbone, [self.adapter], examples)[:, 0]


class AdaptedOnTheFirstStep:
    """What APER and RanPAC's phase 1 share: a FirstSession adapter, trained when the first step arrives, before the
    method learns that step (and every later one) in `embed`'s features through it. Put before the method's class."""

    def __init__(self, setting):
        super().__init__(setting)
        self.first = FirstSession(setting)

    def learn(self, step: StepData) -> None:
        self.first.adapt(step)
        super().learn(step)

    def details(self) -> dict:
        return super().details() | {"adapter": self.first.training}


@register_method("aper")
class APER(AdaptedOnTheFirstStep, PrototypeClassifier):
    keeps = "class means (pretrained + adapted features)"

    def embed(self, examples: Examples) -> torch.Tensor:
        return torch.cat([examples.features.float(), self.first(examples)], dim=1)


@register_method("ranpac_fsa")
class RanPACFirstSession(AdaptedOnTheFirstStep, RanPAC):
    keeps = RanPAC.keeps + " (adapted features)"

    def embed(self, examples: Examples) -> torch.Tensor:
        return self.first(examples)
