"""Learning without forgetting (Li & Hoiem, ECCV 2016; TPAMI 2018), for one growing head:

    loss = CE + α T² KL( softmax(z_old / T) || softmax(z / T) )   over the classes seen before this step

z_old the logits of the model as it was before the step (kept, frozen), on the current step's examples:
the new model is asked to keep answering the old classes as the old one did. α, T: hyperparameters.py
(the paper's 1 and 2 until the tuning stream chose).
Kept: the previous model (a copy of the tuned weights).
"""

import copy

import torch
from torch import nn
from torch.nn import functional as F

from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, module_bytes, register_method
from redkit_experiments.incremental.methods.finetune import FineTuned, masked_logits


@register_method("lwf")
class LwF(FineTuned):
    keeps = "the previous model"

    def __init__(self, setting):
        super().__init__(setting)
        self.teacher: nn.ModuleDict | None = None  # the model as it was before this step: backbone + classifier
        self.old = torch.zeros(setting.num_classes, dtype=torch.bool)  # (C,) the classes it answers for

    def before_step(self, step: StepData) -> None:
        if step.t == 0:
            return
        # A frozen copy of the model, and only of it: the previous teacher is dropped, not kept inside this one.
        model = nn.ModuleDict({"backbone": self.backbone, "classifier": self.classifier})
        self.teacher = copy.deepcopy(model).eval().requires_grad_(False)
        self.old = self.seen.clone()

    def extra_loss(self, batch: Examples, logits: torch.Tensor) -> torch.Tensor | float:
        if self.teacher is None:
            return 0.0
        alpha, temperature = (self.setting.config.hyper("lwf", key, self.name) for key in ("alpha", "temperature"))
        with torch.no_grad():
            old = masked_logits(self.teacher["backbone"], self.teacher["classifier"], batch, self.old)
            old = old[:, self.old.to(old.device)] / temperature
        new = logits[:, self.old.to(logits.device)] / temperature
        kl = F.kl_div(F.log_softmax(new, dim=-1), F.log_softmax(old, dim=-1), log_target=True, reduction="batchmean")
        return alpha * temperature**2 * kl

    def kept(self) -> Kept:
        if self.teacher is None:
            return Kept()  # the tuned weights only: the frozen layers are the pretrained ones everyone has
        return Kept(weight_bytes=module_bytes(self.teacher["backbone"].top_layers, self.teacher["classifier"]))
