"""An owner whose expert lives inside the backbone: its own copy of the pretrained top layers and rows over its own
classes, trained on its data alone (replay-free RED with tuned owners, the study's `red_tuned`). What reaches the
server from owner k:

    top_k        the backbone's top layers (the run's trainable ones, 2 by default), tuned from the pretrained ones
    rows_k       R_k (C_k, d): p(y | x, k) = softmax_{y in k} R_k(pool(top_k(prefix(x))))
    statistics   counts, class means and scatter of φ(r(x)) over its training queries, where
                     r(x) = [h, lower · |h| / |lower|]   (2d,) h the pretrained pooled features, lower the mean of
                                                          the frozen layers' last states (the first tuned
                                                          layer's input): both what the frozen encoder gives
                                                          everyone, so the server can route before any owner
                                                          answers
                     φ = ReLU(r P), P (2d, ROUTER_WIDTH) from the run's seed
    density      its class Gaussians of pool(top_k(prefix(x))), calibrated on its own val (redkit/oos/owner_density.py)

The server's router is the ridge solved from the summed statistics (ridge.py); a query goes to the owner of the
ridge's best class and that owner's top layers and rows alone answer it. Why these pieces, measured piece by piece
with the other fixed: docs/results/incremental.md (the ablation of `red_tuned`).

`train_tuned_expert` is the one place an owner's top layers are trained: the study's `red_tuned`
(redkit_experiments/incremental) and a fit run's replay-free recipe with `--owner-experts tuned`
(redkit/fitting/tuned_owners.py) both call it, seeded by `owner_seed` from the domain's name.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.backbone import Backbone
from redkit.errors import RedkitError
from redkit.features import PrefixStates
from redkit.modules.layers import LabelRows
from redkit.train.loop import FitResult, TrainConfig, fit

ROUTER_WIDTH = 4096  # M of φ(r), chosen on CLINC150's val (scripts/incremental_red_ablation.py)
SCORE_BATCH = 256  # texts scored at once, by similar lengths


def router_input(
    h: torch.Tensor, states: torch.Tensor | None, mask: torch.Tensor, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """(N, 2d) r(x) in `dtype`: the pooled features h (N, d) and the mean of the frozen layers' last states (N, T, d)
    under the attention mask (N, T), the latter scaled to h's length. The lower layers' states add what the last
    ones smooth over (on CLINC150's val the ridge sends 98.6 % of the queries home on both, 98.3 % on h alone).
    The owners' statistics are of float64 r; the served graph computes it in float32."""
    if states is None:
        raise RedkitError("the tuned owners' router reads the frozen layers' states: leave a layer frozen")
    h, mask = h.to(dtype), mask.to(dtype)
    lower = torch.einsum("ntd,nt->nd", states.to(dtype), mask) / mask.sum(1, keepdim=True)  # (N, d)
    return torch.cat([h, lower * (h.norm(dim=1, keepdim=True) / lower.norm(dim=1, keepdim=True))], dim=1)


def scores_by_length(logits_of: Callable[[torch.Tensor], torch.Tensor], lengths: torch.Tensor, width: int):
    """(N, width) `logits_of(rows)` of every row, SCORE_BATCH rows of similar lengths at a time (they pad less)."""
    order = torch.argsort(lengths, stable=True)
    out = torch.empty(len(lengths), width)
    for chunk in order.split(SCORE_BATCH):
        out[chunk] = logits_of(chunk).float().cpu()
    return out


@dataclass
class TunedExpert:
    """One owner's expert: its tuned top layers and its rows over its own classes."""

    top: dict[str, torch.Tensor]  # Backbone.top_state_dict() after the owner's training
    rows: LabelRows  # (C_k, d)
    result: FitResult  # epochs, best epoch, its val accuracy

    @torch.no_grad()
    def pooled(self, backbone: Backbone, prefix: PrefixStates, device: torch.device) -> torch.Tensor:
        """(N, d) the pooled output of this owner's top layers on texts with cached prefix states (loads its top
        into `backbone`)."""
        backbone.load_top_state_dict(self.top)
        backbone.eval()
        return scores_by_length(
            lambda rows: backbone(*prefix.batch(rows, device)), prefix.lengths(), backbone.hidden_size
        )


def train_tuned_expert(
    backbone: Backbone,
    pretrained_top: dict[str, torch.Tensor],
    labels: tuple[str, ...],
    train: tuple[PrefixStates, torch.Tensor],
    val: tuple[PrefixStates, torch.Tensor],
    *,
    seed: int,
    config: TrainConfig,
    device: torch.device,
    desc: str = "owner",
    checkpoint_dir=None,
    log=None,
) -> TunedExpert:
    """The owner's top layers (from `pretrained_top`) and rows over `labels`, trained on its train and early-stopped
    on its val alone: prefix states and classes (N,) indexing `labels`. `backbone` is the working copy whose top
    layers are trained (left holding the owner's). Seeded by `seed` alone: the same data, the same expert."""
    (prefix, targets), (val_prefix, val_targets) = train, val
    backbone.load_top_state_dict(pretrained_top)
    torch.manual_seed(seed)
    rows = LabelRows(LabelRows.Config(backbone.hidden_size, len(labels), tuple(labels))).to(device)

    def logits(states: PrefixStates, index: torch.Tensor) -> torch.Tensor:
        return rows(backbone(*states.batch(index, device)))

    def batch_loss(index: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits(prefix, index), targets[index].to(device), label_smoothing=config.label_smoothing)

    def validate() -> dict[str, float]:
        scores = scores_by_length(lambda index: logits(val_prefix, index), val_prefix.lengths(), len(labels))
        return {
            "loss": float(F.cross_entropy(scores, val_targets)),
            "accuracy": float((scores.argmax(-1) == val_targets).float().mean()),
        }

    result = fit(
        nn.ModuleDict({"top": backbone.top_layers, "classifier": rows}),
        batch_loss,
        len(targets),
        validate,
        config,
        seed=seed,
        checkpoint_dir=checkpoint_dir,
        desc=desc,
        log=log,
        head=rows,
        lengths=prefix.lengths(),
    )
    backbone.eval()
    rows.eval()
    top = {k: v.detach().clone() for k, v in backbone.top_state_dict().items()}
    return TunedExpert(top, rows, result)
