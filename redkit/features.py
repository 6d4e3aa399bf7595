"""Pooled backbone features, computed once per distinct text and cached on disk.

Arithmetic datasets repeat their questions a lot (Task 1 has 2,401 operand pairs and a handful of
templates, so 80k examples hold about 20k distinct questions): each distinct text is encoded
once, batched by length, and the rows are gathered back in example order.

Cache files live in `<run>/cache/` and are keyed by (backbone fingerprint, data hash, pooling):
the backbone fingerprint covers the tuned top layers, so retraining stage base invalidates them.
"""

import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from redkit.atomic import atomic_path
from redkit.backbone import Backbone


def text_hash(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _unique(texts: list[str]) -> tuple[list[str], torch.Tensor]:
    """Distinct texts, and for each input text the index of its distinct text."""
    index: dict[str, int] = {}
    rows = [index.setdefault(text, len(index)) for text in texts]
    return list(index), torch.tensor(rows, dtype=torch.long)


@torch.inference_mode()
def encode(backbone: Backbone, texts: list[str], batch_size: int = 256, desc: str = "encode") -> torch.Tensor:
    """Texts -> (N, d) pooled features through the whole backbone (frozen prefix + current top)."""
    distinct, rows = _unique(texts)
    order = sorted(range(len(distinct)), key=lambda i: len(distinct[i]))  # similar lengths pad less
    device = next(backbone.parameters()).device
    out = torch.empty(len(distinct), backbone.hidden_size)
    for first in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", leave=False, dynamic_ncols=True):
        chunk = order[first:first + batch_size]
        enc = backbone.tokenize([distinct[i] for i in chunk])
        with backbone.autocast():
            h = backbone(enc["input_ids"].to(device), enc["attention_mask"].to(device))
        out[chunk] = h.float().cpu()
    return out[rows]


def features_path(cache_dir: Path, backbone: Backbone, texts: list[str], name: str) -> Path:
    """The cache file of `texts`' features, keyed by (backbone fingerprint, data hash, pooling)."""
    key = f"{backbone.fingerprint()}-{text_hash(texts)}-{backbone.config.pooling}"
    return Path(cache_dir) / f"features-{name}-{key}.safetensors"


def store_features(path: Path, h: torch.Tensor) -> None:
    with atomic_path(path) as tmp:
        save_file({"h": h.contiguous()}, str(tmp))


def cached_features(cache_dir: Path, backbone: Backbone, texts: list[str], name: str) -> torch.Tensor:
    """`encode`, through a cache file keyed by (backbone fingerprint, data hash, pooling)."""
    path = features_path(cache_dir, backbone, texts, name)
    if path.is_file():
        return load_file(str(path))["h"]
    h = encode(backbone, texts, desc=f"encode {name}")
    store_features(path, h)
    return h


class PrefixStates:
    """Token ids, mask and frozen-prefix states of a text set, padded to one length (N, T[, d]).

    Stage base trains the top layers on these, so the frozen layers run once per distinct text,
    never per epoch. Saved in the cache so that a resumed stage does not recompute them either.
    """

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, states: torch.Tensor):
        self.input_ids, self.attention_mask, self.states = input_ids, attention_mask, states

    @classmethod
    @torch.inference_mode()
    def build(cls, cache_dir: Path, backbone: Backbone, texts: list[str], name: str, batch_size: int = 256) -> "PrefixStates":
        key = f"{backbone.source_fingerprint}-{backbone.split_at}-{text_hash(texts)}"
        path = Path(cache_dir) / f"prefix-{name}-{key}.safetensors"
        if path.is_file():
            t = load_file(str(path))
            return cls(t["input_ids"], t["attention_mask"], t["states"])
        enc = backbone.tokenize(texts, padding="longest")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        device = next(backbone.parameters()).device
        states = torch.empty(*ids.shape, backbone.hidden_size)
        for first in tqdm(range(0, len(texts), batch_size), desc=f"prefix {name}", unit="batch", leave=False, dynamic_ncols=True):
            sl = slice(first, first + batch_size)
            states[sl] = backbone.run_prefix(ids[sl].to(device), mask[sl].to(device)).float().cpu()
        with atomic_path(path) as tmp:
            save_file({"input_ids": ids, "attention_mask": mask, "states": states}, str(tmp))
        return cls(ids, mask, states)

    def batch(self, index: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows `index`, cut to the longest real length among them (padding costs compute)."""
        mask = self.attention_mask[index]
        length = int(mask.sum(dim=1).max())
        return (self.input_ids[index, :length].to(device), mask[:, :length].to(device),
                self.states[index, :length].to(device))
