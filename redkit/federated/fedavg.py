"""The reference a team whose data cannot leave its owners runs today: federated averaging (FedAvg, McMahan
et al. 2017) of the `joint` fine-tune, and its two best-known variants, Flower's strategies on the server
(flower_app.py, strategies.py), this on each owner.

    model      the pretrained backbone's top N layers + one classifier over every owner's labels (the label
               names are agreed up front, as FedAvg needs one output layer; no example is)
    a round    the server's weights w_t ─► each owner: E local epochs of the joint recipe on its own examples
               (AdamW at the round's lr, 2e-4 by default, weight decay 0.01, batches of 32, label smoothing 0.1;
               a constant rate: a schedule restarted every round would warm up from 0 each time; FedProx, Li et
               al. 2020, adds mu/2 ||w - w_t||² to the loss) ─► the weights back, combined by the server's
               strategy (FedAvg and FedProx: averaged by example count; FedAdam: the average's step taken by
               Adam on the server)
    what moves every round, each way and per owner: the N layers and the classifier (count_bytes of Flower's
               ArrayRecord). The frozen layers' states of an owner's texts are computed once, on its machine.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from redkit.backbone import Backbone, BackboneConfig
from redkit.features import PrefixStates
from redkit.modules.layers import Classifier
from redkit.train.loop import FitResult, TrainConfig, fit

EVAL_BATCH = 256


@dataclass
class FedAvgConfig:
    backbone: BackboneConfig = field(default_factory=lambda: BackboneConfig(trainable_layers=2, max_length=128))
    training: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=2e-4,
            batch_size=32,
            virtual_batch_size=32,
            max_epochs=1,
            weight_decay=0.01,
            label_smoothing=0.1,
            length_grouped=True,
        )
    )
    seed: int = 0


class FineTune:
    """The fine-tuned model every FedAvg owner holds a copy of: `state()` / `load(state)` are what travels."""

    def __init__(self, config: FedAvgConfig, labels: tuple[str, ...]):
        self.config, self.labels = config, tuple(labels)
        self.index = {label: c for c, label in enumerate(self.labels)}
        self.backbone = Backbone(config.backbone)
        torch.manual_seed(config.seed)  # the initial classifier: the same on the server and every owner
        self.classifier = Classifier(Classifier.Config(self.backbone.hidden_size, len(self.labels)))

    def state(self) -> dict[str, torch.Tensor]:
        """What is averaged: the top layers' and the classifier's tensors, by name."""
        top = {f"top.{k}": v for k, v in self.backbone.top_state_dict().items()}
        return top | {f"classifier.{k}": v for k, v in self.classifier.state_dict().items()}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        self.backbone.load_top_state_dict({k[4:]: v for k, v in state.items() if k.startswith("top.")})
        self.classifier.load_state_dict({k[11:]: v for k, v in state.items() if k.startswith("classifier.")})

    def states(self, cache: Path, texts: list[str], name: str) -> PrefixStates:
        return PrefixStates.build(cache, self.backbone, texts, name)

    def train_round(
        self,
        texts: list[str],
        labels: list[str],
        cache: Path,
        seed: int,
        epochs: int = 1,
        lr: float | None = None,
        proximal_mu: float = 0.0,
    ) -> int:
        """A round's local training on (texts, labels), from the weights `load` gave it: `epochs` epochs at `lr`
        (None: the config's), every one kept (nothing to select among: the last is what goes back), with
        FedProx's proximal term when `proximal_mu` > 0; returns the number of examples (FedAvg's weight)."""
        training = replace(self.config.training, max_epochs=epochs, select_by="last", lr=lr or self.config.training.lr)
        self.train(texts, labels, cache, seed, lambda: 0.0, "local round", training, proximal_mu)
        return len(labels)

    def train(
        self,
        texts: list[str],
        labels: list[str],
        cache: Path,
        seed: int,
        validate: Callable[[], float | dict],
        desc: str = "fine-tune",
        training: TrainConfig | None = None,
        proximal_mu: float = 0.0,
    ) -> FitResult:
        """`training` (None: the config's) on (texts, labels): its epochs, the one `validate` prefers kept (the
        loop's `select_by`); the model holds it on return. `proximal_mu` > 0: FedProx's mu/2 ||w - w0||², w0 the
        weights it starts from (the paper's squared norm, over every trained tensor)."""
        training = training or self.config.training
        prefix = self.states(cache, texts, "train")
        y = torch.tensor([self.index[label] for label in labels])
        trainable = nn.ModuleDict({"top": self.backbone.top_layers, "classifier": self.classifier})
        smoothing = training.label_smoothing
        start = [p.detach().clone() for p in trainable.parameters()] if proximal_mu else []

        def batch_loss(idx: torch.Tensor) -> torch.Tensor:
            logits = self.classifier(self.backbone(*prefix.batch(idx, torch.device("cpu"))))
            loss = F.cross_entropy(logits, y[idx], label_smoothing=smoothing)
            if proximal_mu:
                drift = sum(((p - p0) ** 2).sum() for p, p0 in zip(trainable.parameters(), start, strict=True))
                loss = loss + proximal_mu / 2 * drift
            return loss

        result = fit(
            trainable,
            batch_loss,
            len(y),
            validate,
            training,
            seed=seed,
            desc=desc,
            lengths=prefix.lengths(),
        )
        self.backbone.eval()
        return result

    @torch.no_grad()
    def logits(self, texts: list[str], cache: Path, name: str) -> torch.Tensor:
        """(N, C) the model's logits for `texts` (their frozen layers' states cached under `name`)."""
        prefix = self.states(cache, texts, name)
        order = torch.argsort(prefix.lengths(), stable=True)  # similar lengths pad less
        logits = torch.empty(len(texts), len(self.labels))
        for chunk in order.split(EVAL_BATCH):
            logits[chunk] = self.classifier(self.backbone(*prefix.batch(chunk, torch.device("cpu"))))
        return logits

    def validation(self, texts: list[str], labels: list[str], cache: Path) -> dict[str, float]:
        """{"loss", "accuracy"} on (texts, labels), every label one of the model's: what picks a fine-tune's epoch
        (in eval mode: the loop sets it before it validates)."""
        truth = torch.tensor([self.index[label] for label in labels])
        logits = self.logits(texts, cache, "val")
        return {
            "loss": float(F.cross_entropy(logits, truth)),
            "accuracy": float((logits.argmax(-1) == truth).float().mean()),
        }

    def accuracy(self, texts: list[str], labels: list[str], cache: Path, name: str = "test") -> float:
        truth = torch.tensor([self.index.get(label, -1) for label in labels])  # a label it lacks: never right
        return int((self.logits(texts, cache, name).argmax(-1) == truth).sum()) / len(truth)
