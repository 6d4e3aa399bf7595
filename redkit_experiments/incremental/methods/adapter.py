"""The parameter-efficient module of the adapter baselines (aper.py: APER and RanPAC's first-session adaptation;
ease.py: EASE): AdaptFormer's parallel bottleneck adapter (Chen et al., NeurIPS 2022) on each tuned top layer of
the frozen pretrained backbone, as the authors' code builds it (RevisitingCIL, RanPAC and EASE share
convs/vision_transformer_adapter.py: ffn_option "parallel", bottleneck 64, scale 0.1, no LayerNorm, dropout 0.1,
"lora" init: the up-projection zero, so that a new adapter leaves the backbone as it was).

    adapter(a) = s · W_up dropout(ReLU(W_down a + b_down)) + b_up            W_down (64, d), W_up (d, 64), s = 0.1

Where it sits. The authors' ViT is pre-LN, MiniLM (BERT) post-LN; the adapter reads the residual stream after
attention and adds beside the feed-forward block, which maps as

    ViT (the authors')                                  BERT (here)
    x = x + attn(norm1(x))                              a = LN1(x + attn(x))             the attention output
    x = x + mlp(norm2(x)) + s·adapter(x)                y = LN2(a + ffn(a) + s·adapter(a))

so in BERT its input is the attention block's (normalised) output, the feed-forward block's own input, and its
output joins the feed-forward output and the residual before the LayerNorm that closes the layer. A forward
pre-hook on each layer's `output` (BertOutput: LN2(dropout(dense(intermediate)) + a)) swaps its residual input a
for a + s·adapter(a), which is the same sum; the backbone's own weights are untouched and frozen, and an adapter
attaches only while `attached` is open, so one backbone serves every adapter (EASE's one per step).

Training (`train_adapter`): the adapter and a fresh cosine head over one step's classes (the authors'
CosineLinear: σ · cos(h, w), σ learnable from 1), cross-entropy on that step's train, early-stopped on that step's
val (the only val a continual learner has), with the study's loop (redkit.train.loop.fit). The authors run SGD
(momentum 0.9, lr 0.01, weight decay 5e-4, batch 48) for 20 epochs with cosine annealing to 0; `fit` is AdamW,
and ADAPTER_TRAINING keeps their batch, weight decay and epochs, with AdamW's rate for adapters (1e-3: AdamW's
step does not scale with the gradient, so SGD's rate does not carry over), a linear decay to 0 in place of the
cosine, and patience 3 on the step's val accuracy (the authors keep the last epoch). The head's σ gets its own,
larger rate (HEAD_LR): with AdamW's small steps it would otherwise hardly leave 1 in 20 epochs, and logits in
[-1, 1] leave the softmax nearly flat. Measured on 2 CPU cores, MiniLM's top 2 layers: an epoch of one CLINC150
domain (1,500 training queries, then its 300 val) takes about 1.6 s; the val accuracy peaks within 1-3 epochs on most
domains, so most adapters stop after 4-6 (about 10 s each).
"""

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from redkit.backbone import Backbone
from redkit.errors import RedkitError
from redkit.train.loop import TrainConfig, fit
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Setting
from redkit_experiments.incremental.methods.finetune import EVAL_BATCH

WIDTH = 64  # the bottleneck (ffn_num)
SCALE = 0.1  # s (ffn_adapter_scalar)
DROPOUT = 0.1  # inside the bottleneck, training only
HEAD_LR = 1e-2  # the cosine head's weights and σ (see the module's docstring)

ADAPTER_TRAINING = TrainConfig(
    lr=1e-3,
    head_lr=HEAD_LR,
    batch_size=48,
    virtual_batch_size=48,
    max_epochs=20,
    patience=3,
    weight_decay=5e-4,
    schedule="linear",
    warmup_ratio=0.0,
    select_by="accuracy",
    length_grouped=True,
)


class Bottleneck(nn.Module):
    """One layer's adapter: (..., d) -> (..., d), zero until trained (the up-projection starts at 0)."""

    def __init__(self, dim: int, width: int = WIDTH, scale: float = SCALE, dropout: float = DROPOUT):
        super().__init__()
        self.down, self.up = nn.Linear(dim, width), nn.Linear(width, dim)
        self.scale, self.dropout = scale, nn.Dropout(dropout)
        with torch.no_grad():  # "lora": the down-projection as nn.Linear draws it, the rest zero
            nn.init.kaiming_uniform_(self.down.weight, a=5**0.5)
            nn.init.zeros_(self.down.bias)
            nn.init.zeros_(self.up.weight)
            nn.init.zeros_(self.up.bias)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.scale * self.up(self.dropout(F.relu(self.down(a))))


class Adapter(nn.ModuleList):
    """One Bottleneck per tuned top layer of a backbone."""

    def __init__(self, dim: int, layers: int):
        super().__init__(Bottleneck(dim) for _ in range(layers))

    @classmethod
    def for_backbone(cls, backbone: Backbone) -> "Adapter":
        return cls(backbone.hidden_size, len(backbone.top_layers))

    @contextmanager
    def attached(self, backbone: Backbone) -> Iterator[None]:
        """While open, the backbone's top layers run with this adapter beside their feed-forward blocks."""
        if len(self) != len(backbone.top_layers):
            raise RedkitError(f"an adapter of {len(self)} layers on a backbone tuning {len(backbone.top_layers)}")
        handles = []
        try:
            for layer, bottleneck in zip(backbone.top_layers, self):
                output = getattr(layer, "output", None)
                if output is None or not hasattr(output, "LayerNorm"):
                    raise RedkitError(
                        f"the adapter sits in BERT-like (post-LN) layers; {type(layer).__name__} is not one"
                    )
                handles.append(output.register_forward_pre_hook(_beside_ffn(bottleneck), with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()


def _beside_ffn(bottleneck: Bottleneck):
    """BertOutput(intermediate, a) = LN(dense(intermediate) + a): a -> a + s·adapter(a) adds the adapter's
    output to the feed-forward block's, before the LayerNorm."""

    def hook(module, args, kwargs):
        if len(args) >= 2:
            a = args[1]
            return (args[0], a + bottleneck(a), *args[2:]), kwargs
        a = kwargs["input_tensor"]
        return args, {**kwargs, "input_tensor": a + bottleneck(a)}

    return hook


class CosineHead(nn.Module):
    """The authors' CosineLinear: (B, d) -> (B, K) σ · cos(h, w_k), σ learnable from 1."""

    def __init__(self, dim: int, classes: int):
        super().__init__()
        bound = dim**-0.5
        self.weight = nn.Parameter(torch.empty(classes, dim).uniform_(-bound, bound))
        self.sigma = nn.Parameter(torch.ones(1))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.sigma * F.normalize(h, dim=-1) @ F.normalize(self.weight, dim=-1).T


def frozen_backbone(setting: Setting) -> Backbone:
    """The pretrained backbone, every weight frozen (the adapters are what trains)."""
    backbone = setting.pretrained_backbone()
    backbone.requires_grad_(False)
    return backbone.eval()


def step_seed(setting: Setting, step: StepData) -> int:
    """A seed of the study's seed and the step's name: the same adapter whatever method trains it."""
    digest = hashlib.sha256(f"{setting.config.seed}:{step.name}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % 2**31


@torch.no_grad()
def adapted_features(backbone: Backbone, adapters: Sequence[Adapter | None], examples: Examples) -> torch.Tensor:
    """(N, K, d) pooled features of `examples` through the backbone with each of K adapters (None: none), a batch of
    similar lengths at a time: the top layers run once per adapter and batch, on the cached frozen-layer states."""
    device = next(backbone.parameters()).device
    out = torch.empty(len(examples), len(adapters), backbone.hidden_size)
    order = torch.argsort(examples.lengths(), stable=True)
    for chunk in order.split(EVAL_BATCH):
        batch = examples.subset(chunk).batch(device)
        for k, adapter in enumerate(adapters):
            if adapter is None:
                out[chunk, k] = backbone(*batch).float().cpu()
                continue
            adapter.eval()
            with adapter.attached(backbone):
                out[chunk, k] = backbone(*batch).float().cpu()
    return out


def train_adapter(
    backbone: Backbone, setting: Setting, step: StepData, config: TrainConfig = ADAPTER_TRAINING
) -> tuple[Adapter, dict]:
    """A fresh adapter and cosine head over step's classes, trained on the step's train, the epoch of the best
    val accuracy kept; the adapter comes back frozen, with what the training did. `setting.config.epochs_per_step`,
    where set, caps the epochs (a quick study)."""
    if setting.config.epochs_per_step:
        config = TrainConfig(**(vars(config) | {"max_epochs": setting.config.epochs_per_step}))
    seed = step_seed(setting, step)
    torch.manual_seed(seed)
    device = next(backbone.parameters()).device
    adapter = Adapter.for_backbone(backbone).to(device)
    head = CosineHead(backbone.hidden_size, len(step.classes)).to(device)
    model = nn.ModuleDict({"adapter": adapter, "head": head})
    train, val = step.train, step.val
    targets = step.local(train.classes)

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        with adapter.attached(backbone):
            logits = head(backbone(*train.subset(idx).batch(device)))
        return F.cross_entropy(logits, targets[idx].to(device))

    def validate() -> dict[str, float]:
        h = adapted_features(backbone, [adapter], val)[:, 0].to(device)
        logits = head(h).cpu()
        y = step.local(val.classes)
        return {"loss": float(F.cross_entropy(logits, y)), "accuracy": float((logits.argmax(-1) == y).float().mean())}

    result = fit(
        model,
        batch_loss,
        len(train),
        validate,
        config,
        seed=seed,
        desc=f"adapter {step.name}",
        head=head,
        lengths=train.lengths(),
    )
    adapter.requires_grad_(False).eval()
    return adapter, {
        "step": step.t + 1,
        "epochs": result.epochs,
        "best_epoch": result.best_epoch,
        "val_accuracy": result.best_val_accuracy,
        "seconds": result.seconds,
    }
