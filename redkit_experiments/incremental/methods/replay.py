"""Rehearsal: a buffer of M training examples from earlier steps, filled by reservoir sampling (Vitter 1985)
over the stream, so that every example seen so far is in it with the same probability.

    er        experience replay (Chaudhry et al. 2019): each batch of the current step is trained together
              with a batch of the same size drawn from the buffer: CE(current) + CE(buffer)
    derpp     DER++ (Buzzega et al., NeurIPS 2020): the buffer also keeps the logits the model gave each
              example when it went in; loss = CE(current) + α MSE(z(x'), z_stored) + β CE(buffer batch'')
              on two independent buffer batches, α = 0.1, β = 0.5 (Avalanche's defaults)

ER fills its buffer after each step from that step's examples; DER++ as the paper does, with every batch it
trains on (and its logits then). The study registers er_200, er_1000 and derpp_1000 (the sizes of Wu et al.).
"""

import torch
from torch.nn import functional as F

from redkit_experiments.incremental.methods.base import Kept, register_method
from redkit_experiments.incremental.methods.finetune import FineTuned, examples_kept

DERPP_ALPHA, DERPP_BETA = 0.1, 0.5


class Reservoir:
    """At most `size` items of a stream, each seen item kept with probability size / seen."""

    def __init__(self, size: int, seed: int):
        self.size, self.seen = size, 0
        self.rows: list[int] = []  # rows of train
        self.generator = torch.Generator().manual_seed(seed)

    def offer(self, row: int) -> int | None:
        """Offer one item; returns its slot in the buffer, or None where it was not kept."""
        self.seen += 1
        if len(self.rows) < self.size:
            self.rows.append(row)
            return len(self.rows) - 1
        slot = int(torch.randint(self.seen, (1,), generator=self.generator))
        if slot < self.size:
            self.rows[slot] = row
            return slot
        return None

    def draw(self, count: int) -> torch.Tensor:
        """`count` slots at random (the global torch generator: the training epoch's seed)."""
        return torch.randint(len(self.rows), (min(count, len(self.rows)),))


class ExperienceReplay(FineTuned):
    buffer_size = 0

    def __init__(self, context):
        super().__init__(context)
        self.buffer = Reservoir(self.buffer_size, context.config.seed)

    @property
    def keeps(self) -> str:
        return f"{self.buffer_size:,} examples"

    def extra_loss(self, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | float:
        if not self.buffer.rows:
            return 0.0
        replayed = torch.tensor(self.buffer.rows)[self.buffer.draw(len(rows))]
        return self.cross_entropy(self.logits("train", replayed), self.context.stream.class_of["train"][replayed])

    def after_step(self, t: int, rows: torch.Tensor) -> None:
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(self.context.config.seed + t))
        for row in rows[order].tolist():
            self.buffer.offer(row)

    def kept(self) -> Kept:
        return examples_kept(self.context.stream, torch.tensor(self.buffer.rows, dtype=torch.long))


class DERPlusPlus(FineTuned):
    buffer_size = 0

    def __init__(self, context):
        super().__init__(context)
        self.buffer = Reservoir(self.buffer_size, context.config.seed)
        self.stored = torch.zeros(self.buffer_size, len(context.stream.classes))  # logits when stored
        self.stored_seen = torch.zeros(self.buffer_size, len(context.stream.classes), dtype=torch.bool)

    @property
    def keeps(self) -> str:
        return f"{self.buffer_size:,} examples + their logits"

    def extra_loss(self, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | float:
        loss = 0.0
        if self.buffer.rows:
            slots = self.buffer.draw(len(rows))
            replayed = torch.tensor(self.buffer.rows)[slots]
            seen = self.stored_seen[slots]  # (B, C): the classes whose logits were stored
            now = self.logits("train", replayed, seen=self.seen)
            loss = DERPP_ALPHA * F.mse_loss(now[seen], self.stored[slots][seen])
            slots = self.buffer.draw(len(rows))
            replayed = torch.tensor(self.buffer.rows)[slots]
            loss = loss + DERPP_BETA * self.cross_entropy(
                self.logits("train", replayed), self.context.stream.class_of["train"][replayed]
            )
        for row, z in zip(rows.tolist(), logits.detach()):  # this batch goes in, with its logits now
            slot = self.buffer.offer(row)
            if slot is not None:
                self.stored[slot] = z.masked_fill(~self.seen, 0.0)
                self.stored_seen[slot] = self.seen
        return loss

    def kept(self) -> Kept:
        count = len(self.buffer.rows)
        logits = int(self.stored_seen[:count].sum()) * self.stored.element_size()
        kept = examples_kept(self.context.stream, torch.tensor(self.buffer.rows, dtype=torch.long))
        kept.example_bytes += logits
        return kept


for size in (200, 1000):
    register_method(f"er_{size}")(type(f"ER{size}", (ExperienceReplay,), {"buffer_size": size}))
register_method("derpp_1000")(type("DERPP1000", (DERPlusPlus,), {"buffer_size": 1000}))
