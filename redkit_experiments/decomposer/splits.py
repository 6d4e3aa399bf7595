"""A split as the decomposer trains and predicts on it: its examples, targets, and the features the head reads
(number features through the frozen backbone, cached once per backbone and texts; or the frozen prefix's states
when the top layers are tuned)."""

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from redkit.atomic import atomic_path
from redkit.features import PrefixStates, text_hash
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.decomposer.model import HeadOutput, Positions, StepDecomposer, gather_features, number_positions
from redkit_experiments.decomposer.targets import target_tensors


@torch.inference_mode()
def number_features(
    model: StepDecomposer, texts: list[str], batch_size: int = 128, desc: str = "encode"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, M, 4d) fp16 number features and (N, M) mask, through the whole backbone, batched by length."""
    backbone = model.backbone
    positions = number_positions(backbone, texts)
    M = max(len(p) for p in positions)
    feats = torch.zeros(len(texts), M, 4 * backbone.hidden_size, dtype=torch.float16)
    mask = torch.zeros(len(texts), M, dtype=torch.bool)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    device = next(model.head.parameters()).device
    for first in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", leave=False, dynamic_ncols=True):
        chunk = order[first : first + batch_size]
        enc = backbone.tokenize([texts[i] for i in chunk])
        states = model.token_states(enc["input_ids"].to(device), enc["attention_mask"].to(device))
        f, m = gather_features(states, enc["attention_mask"].to(device), [positions[i] for i in chunk])
        feats[chunk, : f.shape[1]] = f.half().cpu()
        mask[chunk, : m.shape[1]] = m.cpu()
    return feats, mask


def cached_number_features(
    cache_dir: Path, model: StepDecomposer, texts: list[str], name: str, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    path = cache_dir / f"numbers-{name}-{model.backbone.fingerprint()}-{text_hash(texts)}.safetensors"
    if path.is_file():
        t = load_file(str(path))
        return t["features"], t["mask"]
    feats, mask = number_features(model, texts, batch_size, desc=f"encode {name}")
    with atomic_path(path) as tmp:
        save_file({"features": feats.contiguous(), "mask": mask.contiguous()}, str(tmp))
    return feats, mask


class Split:
    """One split's examples, targets and a way to compute the head's outputs for any rows of it."""

    def __init__(self, examples: list[Example], operators: Sequence[str], name: str):
        self.examples, self.name = examples, name
        self.texts = [ex.question for ex in examples]
        self.slots, self.ops = target_tensors(examples, operators)
        self.features: tuple[torch.Tensor, torch.Tensor] | None = None  # frozen: cached number features
        self.prefix: PrefixStates | None = None  # tune_top: cached prefix states
        self.positions: Positions = []

    def __len__(self) -> int:
        return len(self.examples)

    def outputs(self, model: StepDecomposer, idx: torch.Tensor, device: torch.device) -> HeadOutput:
        if self.features is not None:
            feats, mask = self.features
            mask = mask[idx]
            M = int(mask.sum(dim=1).max())
            return model.head(feats[idx, :M].to(device).float(), mask[:, :M].to(device))
        ids, attention, prefix = self.prefix.batch(idx, device)
        return model(ids, attention, [self.positions[i] for i in idx.tolist()], prefix=prefix)

    def loss(self, model: StepDecomposer, idx: torch.Tensor, device: torch.device) -> torch.Tensor:
        out = self.outputs(model, idx, device)
        M = out.mask.shape[1]
        return model.head.loss(out, self.slots[idx, :M].to(device), self.ops[idx, :M].to(device))[0]


class TextSplit(Split):
    """A split to predict on, without training targets (computing them aligns every question)."""

    def __init__(self, texts: list[str], name: str):
        self.texts, self.name = list(texts), name
        self.features, self.prefix, self.positions = None, None, []

    def __len__(self) -> int:
        return len(self.texts)
