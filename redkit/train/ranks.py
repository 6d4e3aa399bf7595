"""Rank bookkeeping: this process's place among a stage's data-parallel processes, and the collective
steps the training loop takes through it (a leaf: the loop needs it, the launcher in
redkit/train/distributed.py needs the loop). `Ranks()` is the one-process run, where every step is
a no-op; redkit/train/distributed.py says what N processes compute against it."""

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """This process's place among the stage's processes; `Ranks()` is the one-process run."""

    rank: int = 0
    world: int = 1

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def shard(self, batch: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(B,) global batch -> (this rank's contiguous slice (b,), the weight of its mean loss).

        The weight b / B makes the all-reduced sum of the ranks' gradients the gradient of the
        global mean, also when B does not divide by N (the last batch of an epoch)."""
        if self.world == 1:
            return batch, 1.0
        local = torch.tensor_split(batch, self.world)[self.rank]
        return local, len(local) / len(batch)

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum every parameter's gradient over the ranks, in one flat all-reduce. A parameter no rank
        gave a gradient keeps none (AdamW then skips it, as in one process); a rank whose slice was
        empty contributes zeros."""
        if self.world == 1:
            return
        present = torch.tensor([0.0 if p.grad is None else 1.0 for p in params], device=params[0].device)
        flat = torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1) for p in params])
        dist.all_reduce(present)
        dist.all_reduce(flat)
        offset = 0
        for p, has in zip(params, present.tolist()):
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone() if has else None
            offset += n

    def sum(self, values: list[float]) -> list[float]:
        """Floats summed over the ranks (float64), the same on every rank."""
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        dist.broadcast(t, 0)  # rank 0's bytes on every rank, whatever the all-reduce algorithm
        return t.tolist()

    def agree(self, value: float) -> float:
        """Rank 0's `value` on every rank (what early stopping decides on)."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(t, 0)
        return float(t.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()
