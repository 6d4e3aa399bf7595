"""Rehearsal: a buffer of M training examples from earlier steps, filled by reservoir sampling (Vitter 1985)
over the stream, so that every example seen so far is in it with the same probability.

    er        experience replay (Chaudhry et al. 2019): each batch of the current step is trained together
              with a batch of the same size drawn from the buffer: CE(current) + CE(buffer)
    derpp     DER++ (Buzzega et al., NeurIPS 2020): the buffer also keeps the logits the model gave each
              example when it went in; loss = CE(current) + α MSE(z(x'), z_stored) + β CE(buffer batch'')
              on two independent buffer batches (α, β from the tuning stream: tuning.py; Avalanche's defaults
              0.1, 0.5 before it)

ER fills its buffer after each step from that step's examples; DER++ as the paper does, with every batch it
trains on (and its logits then). The study registers er_200, er_1000 and derpp_1000 (the sizes of Wu et al.).
"""

import torch
from torch.nn import functional as F

from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, register_method
from redkit_experiments.incremental.methods.finetune import FineTuned


class Reservoir:
    """At most `size` items of a stream, each seen item kept with probability size / seen."""

    def __init__(self, size: int, seed: int):
        self.size, self.seen = size, 0
        self.items: list = []  # what is kept (here: one example each, a copy)
        self.generator = torch.Generator().manual_seed(seed)

    def offer(self, item) -> int | None:
        """Offer one item; returns its slot in the buffer, or None where it was not kept."""
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(item)
            return len(self.items) - 1
        slot = int(torch.randint(self.seen, (1,), generator=self.generator))
        if slot < self.size:
            self.items[slot] = item
            return slot
        return None

    def draw(self, count: int) -> torch.Tensor:
        """`count` slots at random (the global torch generator: the training epoch's seed)."""
        return torch.randint(len(self.items), (min(count, len(self.items)),))

    def examples(self, slots: torch.Tensor) -> Examples:
        return Examples.concat([self.items[s] for s in slots.tolist()])

    def kept(self) -> Kept:
        return Kept(examples=len(self.items), example_bytes=sum(e.stored_bytes() for e in self.items))


class ExperienceReplay(FineTuned):
    buffer_size = 0

    def __init__(self, setting):
        super().__init__(setting)
        self.buffer = Reservoir(self.buffer_size, setting.config.seed)

    @property
    def keeps(self) -> str:
        return f"{self.buffer_size:,} examples"

    def extra_loss(self, batch: Examples, logits: torch.Tensor) -> torch.Tensor | float:
        if not self.buffer.items:
            return 0.0
        replayed = self.buffer.examples(self.buffer.draw(len(batch)))
        return self.cross_entropy(self.logits(replayed), replayed.classes)

    def after_step(self, step: StepData) -> None:
        seed = self.setting.config.seed + step.t
        order = torch.randperm(len(step.train), generator=torch.Generator().manual_seed(seed))
        for n in order.tolist():
            self.buffer.offer(step.train.subset([n]))

    def kept(self) -> Kept:
        return self.buffer.kept()


class DERPlusPlus(FineTuned):
    buffer_size = 0

    def __init__(self, setting):
        super().__init__(setting)
        self.buffer = Reservoir(self.buffer_size, setting.config.seed)
        self.stored = torch.zeros(self.buffer_size, setting.num_classes)  # logits when stored
        self.stored_seen = torch.zeros(self.buffer_size, setting.num_classes, dtype=torch.bool)

    @property
    def keeps(self) -> str:
        return f"{self.buffer_size:,} examples + their logits"

    def extra_loss(self, batch: Examples, logits: torch.Tensor) -> torch.Tensor | float:
        loss = 0.0
        alpha, beta = (self.setting.config.hyper("derpp", key, self.name) for key in ("alpha", "beta"))
        if self.buffer.items:
            slots = self.buffer.draw(len(batch))
            seen = self.stored_seen[slots]  # (B, C): the classes whose logits were stored
            now = self.logits(self.buffer.examples(slots), seen=self.seen)
            loss = alpha * F.mse_loss(now[seen.to(now.device)], self.stored[slots][seen].to(now.device))
            replayed = self.buffer.examples(self.buffer.draw(len(batch)))
            loss = loss + beta * self.cross_entropy(self.logits(replayed), replayed.classes)
        for n, z in enumerate(logits.detach().cpu()):  # this batch goes in, with its logits now (kept on the CPU)
            slot = self.buffer.offer(batch.subset([n]))
            if slot is not None:
                self.stored[slot] = z.masked_fill(~self.seen, 0.0)
                self.stored_seen[slot] = self.seen
        return loss

    def kept(self) -> Kept:
        kept = self.buffer.kept()
        kept.example_bytes += int(self.stored_seen[: len(self.buffer.items)].sum()) * self.stored.element_size()
        return kept


for size in (200, 1000):
    register_method(f"er_{size}")(type(f"ER{size}", (ExperienceReplay,), {"buffer_size": size}))
register_method("derpp_1000")(type("DERPP1000", (DERPlusPlus,), {"buffer_size": 1000}))
