"""The strategies that fine-tune the backbone, on one learner: the pretrained backbone's top N layers (the
frozen ones run once, their states cached: StudyContext.prefix) and one classifier over every class, whose
rows for classes not yet seen are masked out (class-incremental: one head, no task id).

    finetune   sequential fine-tuning: each step's data, cross-entropy over the classes seen so far
    joint      the upper bound: retrained from the pretrained backbone on every step's data so far, with the
               fine-tuning recipe's own epochs and early stopping (where the study's budget allows)

Every strategy trains each step with the fit recipe's optimiser, schedule and batch, at its own learning rate, for
at most its own epochs, early-stopped on that step's val accuracy (the only val a continual learner has):
IncrementalConfig.step_training, with what the tuning stream chose (hyperparameters.py, tuned.json). The
strategies that add a loss (ewc.py, lwf.py, replay.py) override `extra_loss`, `before_step` and `after_step`.
"""

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.layers import Classifier
from redkit.train.loop import TrainConfig, fit
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, Method, register_method

EVAL_BATCH = 256


class FineTuned(Method):
    def __init__(self, setting):
        super().__init__(setting)
        self.start_afresh()
        self.seen = torch.zeros(setting.num_classes, dtype=torch.bool)  # (C,) classes arrived so far

    def start_afresh(self) -> None:
        """The pretrained backbone (its own copy: top N layers trainable) and the initial classifier."""
        self.backbone = self.setting.pretrained_backbone()
        torch.manual_seed(self.setting.config.seed)  # the classifier's init: the same for every strategy
        self.classifier = Classifier(Classifier.Config(self.setting.dim, self.setting.num_classes)).to(
            self.setting.device
        )

    @property
    def trainable(self) -> nn.ModuleDict:
        return nn.ModuleDict({"top": self.backbone.top_layers, "classifier": self.classifier})

    def logits(self, batch: Examples, seen: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) examples -> (B, C) logits, classes outside `seen` (default: seen so far) at -inf."""
        return masked_logits(self.backbone, self.classifier, batch, self.seen if seen is None else seen)

    def train_config(self) -> TrainConfig:
        return self.setting.config.step_training(self.name)

    def training_data(self, step: StepData) -> tuple[Examples, Examples]:
        """(train, val) of what this step trains on: the step's own."""
        return step.train, step.val

    def learn(self, step: StepData) -> None:
        self.before_step(step)
        self.seen[list(step.classes)] = True
        train, val = self.training_data(step)
        config = self.train_config()

        def batch_loss(idx: torch.Tensor) -> torch.Tensor:
            batch = train.subset(idx)
            logits = self.logits(batch)
            return self.cross_entropy(logits, batch.classes, config.label_smoothing) + self.extra_loss(batch, logits)

        fit(
            self.trainable,
            batch_loss,
            len(train),
            lambda: self.validate(val),
            config,
            seed=self.setting.config.seed * 1000 + step.t,
            desc=f"{self.name} step {step.t + 1}",
            head=self.classifier,
            lengths=train.lengths(),
        )
        self.backbone.eval()
        self.after_step(step)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
        """Cross-entropy over the classes seen so far: label smoothing spreads over them, not over classes
        still to come (whose logits are -inf)."""
        return seen_cross_entropy(logits, targets, self.seen, smoothing)

    def validate(self, val: Examples) -> dict[str, float]:
        logits = self.scores(val)
        return {
            "loss": float(self.cross_entropy(logits, val.classes)),
            "accuracy": float((logits.argmax(dim=-1) == val.classes).float().mean()),
        }

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        return batched_scores(self.logits, queries, self.setting.num_classes)

    # ---- what a strategy adds ---------------------------------------------------------------------

    def before_step(self, step: StepData) -> None:
        pass

    def extra_loss(self, batch: Examples, logits: torch.Tensor) -> torch.Tensor | float:
        """A strategy's term beside the cross-entropy of the current batch (its examples and their logits)."""
        return 0.0

    def after_step(self, step: StepData) -> None:
        pass


def masked_logits(backbone: nn.Module, classifier: nn.Module, batch: Examples, seen: torch.Tensor) -> torch.Tensor:
    """(B,) examples -> (B, C) logits of the tuned top layers and the classifier, classes outside `seen` at -inf."""
    device = next(classifier.parameters()).device
    logits = classifier(backbone(*batch.batch(device)))
    return logits.masked_fill(~seen.to(logits.device), float("-inf"))


def seen_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, seen: torch.Tensor, smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy over the classes in `seen` (C,) only: label smoothing spreads over them."""
    columns = seen.nonzero(as_tuple=True)[0].to(logits.device)
    within = torch.full((len(seen),), -1, dtype=torch.long, device=logits.device)
    within[columns] = torch.arange(len(columns), device=logits.device)
    return F.cross_entropy(logits[:, columns], within[targets.to(logits.device)], label_smoothing=smoothing)


@torch.no_grad()
def batched_scores(logits_of, queries: Examples, num_classes: int) -> torch.Tensor:
    """(N, C) scores of `queries`, a batch of similar lengths at a time (similar lengths pad less)."""
    order = torch.argsort(queries.lengths(), stable=True)
    out = torch.empty(len(queries), num_classes)
    for chunk in order.split(EVAL_BATCH):
        out[chunk] = logits_of(queries.subset(chunk)).float().cpu()
    return out


@register_method("finetune")
class SequentialFineTuning(FineTuned):
    keeps = "nothing"


@register_method("joint")
class Joint(FineTuned):
    """Retrained from the pretrained backbone on every step's train so far, early-stopped on every step's val
    so far: what no continual learner may do, the upper bound. It keeps every step's examples to do so, and is
    trained at the steps of `joint_steps` only (its cost grows with the steps); at the others it gives no
    accuracy."""

    keeps = "every example"

    def __init__(self, setting):
        super().__init__(setting)
        self.stored: dict[str, list[Examples]] = {"train": [], "val": []}

    def learn(self, step: StepData) -> None:
        self.seen[list(step.classes)] = True
        for split, kept in self.stored.items():
            kept.append(step[split])
        self.trained_at = None
        if step.t not in self.setting.config.joint_steps_of(self.setting.num_steps):
            return
        self.start_afresh()
        super().learn(step)
        self.trained_at = step.t

    def train_config(self) -> TrainConfig:
        return self.setting.config.joint_training()

    def training_data(self, step: StepData) -> tuple[Examples, Examples]:
        return Examples.concat(self.stored["train"]), Examples.concat(self.stored["val"])

    def kept(self) -> Kept:
        return Kept(
            examples=sum(len(e) for e in self.stored["train"]),
            example_bytes=sum(e.stored_bytes() for e in self.stored["train"]),
        )
