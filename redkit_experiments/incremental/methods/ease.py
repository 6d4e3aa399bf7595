"""EASE (Zhou, Sun, Ye & Zhan, CVPR 2024: expandable subspace ensemble; the authors' models/ease.py and
backbone/linears.py, `recalc_sim` true and `use_init_ptm` false as their default configs): one adapter per step,
each its own feature subspace, and prototypes of every class in every subspace.

    learn step t    a fresh adapter (adapter.py) and a fresh cosine head over step t's classes, trained on step t's
                    train alone (early-stopped on its val), then frozen; the earlier adapters are never touched
    prototypes      step t's classes: their mean feature through every adapter 0..t, from step t's train (the
                    earlier adapters are frozen: one forward pass each), real prototypes p_{c,j}, j <= t
    complement      an earlier step s's classes have no data in a later subspace j > s: their prototype there is
                    synthesised from the classes that have real prototypes in both s and j, those of steps j..t,
                    by their similarity in s (the semantic-guided complement; the authors' solve_sim_reset):

                        p_{c,j} = Σ_r softmax_r( cos(p_{c,s}, p_{r,s}) ) p_{r,j}        (temperature 1)

                    recomputed at every step, the references growing as steps arrive (recalc_sim: the authors'
                    default; the paper's text uses the newest step's classes only, which is recalc_sim false)
    scores          a class c of step i, after step T (0-based; T + 1 subspaces):

                        logit_c(x) = cos(φ_i(x), p_{c,i}) + (α / T) Σ_{j ≠ i, j <= T} cos(φ_j(x), p_{c,j})

                    each subspace normalised on its own (forward_reweight), α = 0.1 (the authors' value on most
                    data sets), and no term but the first at T = 0

Scoring runs the top layers once per adapter over the queries (adapter.py: adapted_features, batched by length).

An adapter sees its own step's classes only, so it learns to map every query onto them: a query of another step may
then sit closer to a prototype in that adapter's subspace than to its own class's in its own (weight 1 in both). The
more an adapter trains, the more such cross-step errors.
"""

import torch
from torch.nn import functional as F

from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.adapter import adapted_features, frozen_backbone, train_adapter
from redkit_experiments.incremental.methods.base import Kept, Method, register_method
from redkit_experiments.incremental.methods.prototypes import class_means

ALPHA = 0.1


def complement(own: torch.Tensor, references_own: torch.Tensor, references_target: torch.Tensor) -> torch.Tensor:
    """Prototypes in a subspace where the classes have no data: (K, d) their prototypes in a subspace s, (R, d) the
    reference classes' in s, (R, d) the references' in the target subspace -> (K, d) theirs in the target."""
    similarity = F.normalize(own, dim=-1) @ F.normalize(references_own, dim=-1).T  # (K, R) cosines
    return F.softmax(similarity, dim=1) @ references_target


def ease_logits(features: torch.Tensor, prototypes: torch.Tensor, owner: torch.Tensor, alpha: float) -> torch.Tensor:
    """(N, S, d) queries through S adapters, (C, S, d) prototypes, (C,) each class's own subspace -> (N, C) logits:
    weight 1 on a class's own subspace, α / (S - 1) on each other."""
    cosines = torch.einsum("nsd,csd->ncs", F.normalize(features, dim=-1), F.normalize(prototypes, dim=-1))
    subspaces = prototypes.shape[1]
    own = F.one_hot(owner, subspaces).to(cosines.dtype)  # (C, S)
    weight = own + (1 - own) * (alpha / max(subspaces - 1, 1))
    return (cosines * weight).sum(dim=-1)


@register_method("ease")
class EASE(Method):
    keeps = "class prototypes in every adapter's subspace"

    def __init__(self, setting, alpha: float = ALPHA):
        super().__init__(setting)
        self.alpha = alpha
        self.backbone = frozen_backbone(setting)
        self.adapters = []  # one per step so far, frozen
        self.step_classes: list[torch.Tensor] = []  # (K_t,) each step's classes
        # (C, S, d): p_{c,j}, class c's prototype in subspace j, for every j of a step so far
        self.prototypes = torch.zeros(setting.num_classes, setting.num_steps, setting.dim)
        self.owner = torch.full((setting.num_classes,), -1, dtype=torch.long)  # (C,) the step of each class
        self.training: list[dict] = []

    def learn(self, step: StepData) -> None:
        adapter, training = train_adapter(self.backbone, self.setting, step)
        self.adapters.append(adapter)
        self.training.append(training)
        t = len(self.adapters) - 1
        classes = torch.tensor(step.classes)
        self.step_classes.append(classes)
        self.owner[classes] = t
        h = adapted_features(self.backbone, self.adapters, step.train)  # (N, t + 1, d)
        for j in range(t + 1):
            self.prototypes[classes, j] = class_means(h[:, j], step.train.classes, classes)
        for s in range(t):  # the earlier steps' classes in every later subspace
            own = self.step_classes[s]
            for j in range(s + 1, t + 1):
                references = torch.cat(self.step_classes[j:])  # steps j..t: real prototypes in s and in j
                self.prototypes[own, j] = complement(
                    self.prototypes[own, s], self.prototypes[references, s], self.prototypes[references, j]
                )

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        subspaces = len(self.adapters)
        h = adapted_features(self.backbone, self.adapters, queries)  # (N, S, d)
        seen = self.owner >= 0
        logits = ease_logits(h, self.prototypes[:, :subspaces], self.owner.clamp(min=0), self.alpha)
        return logits.masked_fill(~seen, float("-inf"))

    def kept(self) -> Kept:
        """Every seen class's prototypes in every subspace so far (real or synthesised)."""
        seen = int((self.owner >= 0).sum())
        return Kept(statistics_bytes=seen * len(self.adapters) * self.setting.dim * self.prototypes.element_size())

    def details(self) -> dict:
        return {"alpha": self.alpha, "complement": "recalc_sim", "adapters": self.training}
