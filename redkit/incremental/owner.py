"""What one owner contributes, computed from its own data alone: its share of a replay-free RED model.

    expert      Δh_t = B σ(A h)              the residual expert (rank r, B = 0 at init)
    label rows  R_t (C_t, d)                 logits over the owner's own classes: R_t(h + Δh_t(h))
    statistics  counts, class means, scatter of φ(h): what routing to this owner needs (statistics.py,
                projection.py)

Expert and rows are trained together on the owner's examples (cross-entropy over its own classes),
early-stopped on its own validation examples; the statistics are sums over its training features. No
other owner's data, module or statistics is read, so a share is the same whenever and wherever it is
made, and shares assemble in any order (redkit/incremental/model.py).

`train_owner_share` is the one place a share is trained: the study's `red` (redkit_experiments/incremental) calls
it, and so does every path of a fit run's replay-free recipe (redkit/fitting/replay_free.py: `redkit fit
--recipe replay-free`, `redkit federate`'s owners, add-domain and train-expert on such a run), seeded by
`owner_seed` from the domain's name.
"""

import zlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.incremental.projection import RandomProjection
from redkit.incremental.statistics import ClassStatistics
from redkit.modules.layers import LabelRows
from redkit.red.layer import ResidualExpert
from redkit.threads import one_thread
from redkit.train.loop import FitResult, TrainConfig, fit

# The stages on cached features' settings (redkit/run/config.py: experts): lr 1e-3, micro-batch 64.
OWNER_TRAINING = TrainConfig(lr=1e-3, batch_size=64, virtual_batch_size=64)


def owner_seed(seed: int, name: str) -> int:
    """An owner's seed from the run's seed and its domain's name alone: not from when it arrived, nor from which
    other domains its run holds, so that every path that builds a domain's share builds the same one."""
    return seed * 1_000_003 + zlib.crc32(name.encode()) % 1_000_003


@dataclass
class OwnerShare:
    name: str  # the owner's domain
    expert: ResidualExpert
    rows: LabelRows  # over `statistics.labels`, in that order
    statistics: ClassStatistics | None  # None once merged into a running sum (redkit/incremental/model.py)
    result: FitResult  # how the expert and rows trained (epochs, best val loss, seconds)

    def log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, C_t) log-probabilities over the owner's own classes."""
        return owner_log_probs(self.expert, self.rows, h)


def owner_log_probs(expert: nn.Module, rows: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """(N, d) -> (N, C_t): log softmax R_t(h + Δh_t(h)), an owner's distribution over its own classes."""
    return F.log_softmax(rows(h + expert(h)), dim=-1)


def train_owner_share(
    name: str,
    labels: tuple[str, ...],
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    seed: int,
    projection: RandomProjection,
    rank: int = 0,
    config: TrainConfig = OWNER_TRAINING,
    checkpoint_dir=None,
    log=None,
) -> OwnerShare:
    """An owner's share from its training features (N, d) and classes (N,) (indices into `labels`) and its
    validation features and classes; `rank` 0 = d / 4; the statistics are of `projection`(h). Seeded by `seed`
    alone: the same data, the same share."""
    h, y = train
    dim = h.shape[1]
    torch.manual_seed(seed)
    expert = ResidualExpert(ResidualExpert.Config(dim=dim, rank=rank or dim // 4))
    rows = LabelRows(LabelRows.Config(dim=dim, num_classes=len(labels), labels=tuple(labels)))
    model = nn.ModuleDict({"expert": expert, "rows": rows})

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(rows(x + expert(x)), t)

    with one_thread():  # small modules: thread hand-offs cost more than their arithmetic
        result = fit(
            model,
            lambda idx: loss(h[idx], y[idx]),
            len(h),
            lambda: loss(*val).item(),
            config,
            seed=seed,
            checkpoint_dir=checkpoint_dir,
            desc=f"owner {name}",
            log=log,
        )
    model.eval()
    with torch.no_grad():
        statistics = ClassStatistics.of(projection(h.double()), y, tuple(labels))
    return OwnerShare(name, expert, rows, statistics, result)
