"""The strategies that fine-tune the backbone, on one learner: the pretrained backbone's top N layers (the
frozen ones run once, their states cached: StudyContext.prefix) and one classifier over every class, whose
rows for classes not yet seen are masked out (class-incremental: one head, no task id).

    finetune   sequential fine-tuning: each step's data, cross-entropy over the classes seen so far
    joint      the upper bound: retrained from the pretrained backbone on every step's data so far, with the
               fine-tuning recipe's own epochs and early stopping (where the study's budget allows)

Every strategy trains each step with the same recipe and budget (StudyConfig: the fit recipe's optimiser,
schedule and batch, `epochs_per_step` epochs, the last kept: continual-learning protocols train a fixed number
of epochs per task and have no held-out data of earlier tasks to stop on). The strategies that add a loss
(ewc.py, lwf.py, replay.py) override `extra_loss`, `before_step` and `after_step`.
"""

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.layers import Classifier
from redkit.train.loop import TrainConfig, fit
from redkit_experiments.incremental.methods.base import Kept, Method, register_method

EVAL_BATCH = 256


class FineTuned(Method):
    def __init__(self, context):
        super().__init__(context)
        self.start_afresh()
        self.seen = torch.zeros(len(context.stream.classes), dtype=torch.bool)  # (C,) classes arrived so far

    def start_afresh(self) -> None:
        """The pretrained backbone (its own copy: top N layers trainable) and the initial classifier."""
        self.backbone = self.context.pretrained_backbone()
        torch.manual_seed(self.context.config.seed)  # the classifier's init: the same for every strategy
        self.classifier = Classifier(Classifier.Config(self.context.dim, len(self.context.stream.classes)))

    @property
    def trainable(self) -> nn.ModuleDict:
        return nn.ModuleDict({"top": self.backbone.top_layers, "classifier": self.classifier})

    def logits(self, split: str, rows: torch.Tensor, seen: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) rows of `split` -> (B, C) logits, classes outside `seen` (default: seen so far) at -inf."""
        prefix = self.context.prefix[split]
        h = self.backbone(*prefix.batch(rows, self.context.device))
        logits = self.classifier(h)
        mask = self.seen if seen is None else seen
        return logits.masked_fill(~mask.to(logits.device), float("-inf"))

    def train_config(self) -> TrainConfig:
        return self.context.config.step_training()

    def step_rows(self, t: int, split: str) -> torch.Tensor:
        return self.context.stream.rows(split, [t])

    def learn(self, t: int) -> None:
        self.before_step(t)
        self.seen[list(self.context.stream.steps[t].classes)] = True
        rows, val_rows = self.step_rows(t, "train"), self.step_rows(t, "val")
        labels = self.context.stream.class_of["train"]
        config = self.train_config()

        def batch_loss(idx: torch.Tensor) -> torch.Tensor:
            batch = rows[idx]
            logits = self.logits("train", batch)
            return self.cross_entropy(logits, labels[batch], config.label_smoothing) + self.extra_loss(batch, logits)

        fit(
            self.trainable,
            batch_loss,
            len(rows),
            lambda: self.validate(val_rows),
            config,
            seed=self.context.config.seed * 1000 + t,
            desc=f"{self.name} step {t + 1}",
            head=self.classifier,
            lengths=self.context.prefix["train"].lengths()[rows],
        )
        self.backbone.eval()
        self.after_step(t, rows)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
        """Cross-entropy over the classes seen so far: label smoothing spreads over them, not over classes
        still to come (whose logits are -inf)."""
        columns = self.seen.nonzero(as_tuple=True)[0].to(logits.device)
        within = torch.full((len(self.seen),), -1, dtype=torch.long, device=logits.device)
        within[columns] = torch.arange(len(columns), device=logits.device)
        return F.cross_entropy(logits[:, columns], within[targets.to(logits.device)], label_smoothing=smoothing)

    def validate(self, rows: torch.Tensor) -> dict[str, float]:
        logits = self.scores("val", rows)
        truth = self.context.stream.class_of["val"][rows]
        return {
            "loss": float(self.cross_entropy(logits, truth)),
            "accuracy": float((logits.argmax(dim=-1) == truth).float().mean()),
        }

    @torch.no_grad()
    def scores(self, split: str, rows: torch.Tensor) -> torch.Tensor:
        order = torch.argsort(self.context.prefix[split].lengths()[rows], stable=True)  # similar lengths pad less
        out = torch.empty(len(rows), len(self.context.stream.classes))
        for chunk in order.split(EVAL_BATCH):
            out[chunk] = self.logits(split, rows[chunk]).float().cpu()
        return out

    # ---- what a strategy adds ---------------------------------------------------------------------

    def before_step(self, t: int) -> None:
        pass

    def extra_loss(self, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | float:
        """A strategy's term beside the cross-entropy of the current batch (rows of train, their logits)."""
        return 0.0

    def after_step(self, t: int, rows: torch.Tensor) -> None:
        pass


@register_method("finetune")
class SequentialFineTuning(FineTuned):
    keeps = "nothing"


@register_method("joint")
class Joint(FineTuned):
    """Retrained from the pretrained backbone on every step's train so far, early-stopped on every step's val
    so far: what no continual learner may do, the upper bound. Trained at the steps of `joint_steps` only
    (its cost grows with the steps); at the others it gives no accuracy."""

    keeps = "every example"

    def learn(self, t: int) -> None:
        self.seen[list(self.context.stream.steps[t].classes)] = True
        self.last_step, self.trained_at = t, None
        if t not in self.context.config.joint_steps_of(len(self.context.stream.steps)):
            return
        self.start_afresh()
        super().learn(t)
        self.trained_at = t

    def train_config(self) -> TrainConfig:
        return self.context.config.joint_training()

    def step_rows(self, t: int, split: str) -> torch.Tensor:
        return self.context.stream.rows(split, range(t + 1))

    def kept(self) -> Kept:
        return examples_kept(self.context.stream, self.context.stream.rows("train", range(self.last_step + 1)))


def examples_kept(stream, rows: torch.Tensor, extra_bytes_each: int = 0) -> Kept:
    """Stored training examples: their count, and their bytes (the text in UTF-8, an 8-byte label, and
    `extra_bytes_each`, e.g. DER++'s stored logits)."""
    texts = stream.texts["train"]
    size = sum(len(texts[i].encode()) + 8 + extra_bytes_each for i in rows.tolist())
    return Kept(examples=len(rows), example_bytes=size)
