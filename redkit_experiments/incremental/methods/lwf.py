"""Learning without forgetting (Li & Hoiem, ECCV 2016; TPAMI 2018), for one growing head:

    loss = CE + α T² KL( softmax(z_old / T) || softmax(z / T) )   over the classes seen before this step

z_old the logits of the model as it was before the step (kept, frozen), on the current step's examples:
the new model is asked to keep answering the old classes as the old one did. α = 1, T = 2 (the paper's).
Kept: the previous model (a copy of the tuned weights).
"""

import copy

import torch
from torch.nn import functional as F

from redkit_experiments.incremental.methods.base import Kept, module_bytes, register_method
from redkit_experiments.incremental.methods.finetune import FineTuned

ALPHA, TEMPERATURE = 1.0, 2.0


@register_method("lwf")
class LwF(FineTuned):
    keeps = "the previous model"

    def __init__(self, context):
        super().__init__(context)
        self.teacher = None

    def before_step(self, t: int) -> None:
        if t == 0:
            return
        self.teacher = self._snapshot()
        self.old = self.seen.clone()

    def _snapshot(self) -> "LwF":
        teacher = copy.copy(self)  # the same context and stream; its own copy of the weights
        teacher.backbone = copy.deepcopy(self.backbone).eval().requires_grad_(False)
        teacher.classifier = copy.deepcopy(self.classifier).eval().requires_grad_(False)
        teacher.seen = self.seen.clone()
        return teacher

    def extra_loss(self, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | float:
        if self.teacher is None:
            return 0.0
        with torch.no_grad():
            old = self.teacher.logits("train", rows)[:, self.old] / TEMPERATURE
        new = logits[:, self.old] / TEMPERATURE
        kl = F.kl_div(F.log_softmax(new, dim=-1), F.log_softmax(old, dim=-1), log_target=True, reduction="batchmean")
        return ALPHA * TEMPERATURE**2 * kl

    def kept(self) -> Kept:
        if self.teacher is None:
            return Kept()
        return Kept(weight_bytes=module_bytes(self.teacher.trainable))
