"""Pooled backbone features, computed once per distinct text and cached on disk.

Arithmetic datasets repeat their questions a lot (Task 1 has 2,401 operand pairs and a handful of
templates, so 80k examples hold about 20k distinct questions): each distinct text is encoded
once, batched by length, and the rows are gathered back in example order.

Cache files live in `<run>/cache/` and are keyed by (backbone fingerprint, data hash, pooling):
the backbone fingerprint covers the tuned top layers, so retraining stage base invalidates them.
"""

import hashlib
import logging
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from redkit.atomic import atomic_path
from redkit.backbone import Backbone

# Says where cached features were reused (`redkit eval` prints it); silent unless a handler is attached.
log = logging.getLogger("redkit.features")


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
        chunk = order[first : first + batch_size]
        enc = backbone.tokenize([distinct[i] for i in chunk])
        with backbone.autocast():
            h = backbone(enc["input_ids"].to(device), enc["attention_mask"].to(device))
        out[chunk] = h.float().cpu()
    return out[rows]


def _features_key(backbone: Backbone, texts: list[str]) -> str:
    return f"{backbone.fingerprint()}-{text_hash(texts)}-{backbone.config.pooling}"


def features_path(cache_dir: Path, backbone: Backbone, texts: list[str], name: str) -> Path:
    """The cache file of `texts`' features, keyed by (backbone fingerprint, data hash, pooling)."""
    return Path(cache_dir) / f"features-{name}-{_features_key(backbone, texts)}.safetensors"


def find_features(cache_dir: Path, backbone: Backbone, texts: list[str], name: str) -> Path | None:
    """The cache file of exactly these texts' features through this backbone, whatever name they were
    cached under (a file whose texts are the run's test split reads the split's features): the name is
    a label, the key (fingerprint, data hash, pooling) is what makes them the same features. None: none."""
    own = features_path(cache_dir, backbone, texts, name)
    if own.is_file():
        return own
    found = sorted(Path(cache_dir).glob(f"features-*-{_features_key(backbone, texts)}.safetensors"))
    return found[0] if found else None


def cached_name(path: Path, backbone: Backbone, texts: list[str]) -> str:
    """The name a features cache file was saved under (`features-<name>-<key>.safetensors`)."""
    return path.name[len("features-") : -len(f"-{_features_key(backbone, texts)}.safetensors")]


def store_features(path: Path, h: torch.Tensor) -> None:
    with atomic_path(path) as tmp:
        save_file({"h": h.contiguous()}, str(tmp))


@torch.inference_mode()
def encode_from_prefix(
    backbone: Backbone, states: "PrefixStates", batch_size: int = 256, desc: str = "encode"
) -> torch.Tensor:
    """(N, d) pooled features of texts whose frozen-prefix states are cached: only the layers above
    the prefix run (the frozen ones ran once, when stage base cached them)."""
    order = torch.argsort(states.lengths(), stable=True)  # similar lengths pad less
    device = next(backbone.parameters()).device
    out = torch.empty(len(order), backbone.hidden_size)
    for chunk in tqdm(order.split(batch_size), desc=desc, unit="batch", leave=False, dynamic_ncols=True):
        with backbone.autocast():
            out[chunk] = backbone(*states.batch(chunk, device)).float().cpu()
    return out


def cached_features(
    cache_dir: Path, backbone: Backbone, texts: list[str], name: str, reuse_prefix: bool = False
) -> torch.Tensor:
    """`encode`, through a cache file keyed by (backbone fingerprint, data hash, pooling): the same
    texts cached under another name (a split evaluated again as a file) are read, not encoded. With
    `reuse_prefix`, texts whose frozen-prefix states a stage cached run through the top layers only
    (the same features up to float rounding: the batches pad differently)."""
    cached = find_features(cache_dir, backbone, texts, name)
    if cached is not None:
        log.info(
            "%s: features of %d texts read from the cache (saved for %r); nothing encoded",
            name,
            len(texts),
            cached_name(cached, backbone, texts),
        )
        return load_file(str(cached))["h"]
    path = features_path(cache_dir, backbone, texts, name)
    found = PrefixStates.find(cache_dir, backbone, texts) if reuse_prefix else None
    if found is not None:
        states, rows = found
        h = encode_from_prefix(backbone, states, desc=f"encode {name} (cached prefix)")[rows]
    else:
        h = encode(backbone, texts, desc=f"encode {name}")
    store_features(path, h)
    return h


class PrefixStates:
    """Token ids, mask and frozen-prefix states of a text set, padded to one length (N, T[, d]).

    Stage base trains the top layers on these, so the frozen layers run once per distinct text,
    never per epoch. Saved in the cache so that a resumed stage does not recompute them either.
    With every layer tuned there is no frozen layer: `states` is None and only the tokens are kept.
    """

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, states: torch.Tensor | None):
        self.input_ids, self.attention_mask, self.states = input_ids, attention_mask, states

    @staticmethod
    def _key(backbone: Backbone, texts: list[str]) -> str:
        return f"{backbone.source_fingerprint}-{backbone.split_at}-{backbone.config.max_length}-{text_hash(texts)}"

    @classmethod
    def _load(cls, path: Path) -> "PrefixStates":
        t = load_file(str(path))
        return cls(t["input_ids"], t["attention_mask"], t.get("states"))

    @classmethod
    def find(cls, cache_dir: Path, backbone: Backbone, texts: list[str]) -> tuple["PrefixStates", torch.Tensor] | None:
        """(states, rows): cached prefix states of `texts` (under any name), or of their distinct texts
        in first-seen order (how stage base caches validation texts), and the row of each text; None
        where no stage cached them, or nothing is frozen."""
        if backbone.split_at == 0:
            return None
        distinct, rows = _unique(texts)
        for candidate, index in ((texts, torch.arange(len(texts))), (distinct, rows)):
            found = sorted(Path(cache_dir).glob(f"prefix-*-{cls._key(backbone, candidate)}.safetensors"))
            if found:
                return cls._load(found[0]), index
        return None

    @classmethod
    @torch.inference_mode()
    def build(
        cls, cache_dir: Path, backbone: Backbone, texts: list[str], name: str, batch_size: int = 256
    ) -> "PrefixStates":
        path = Path(cache_dir) / f"prefix-{name}-{cls._key(backbone, texts)}.safetensors"
        if path.is_file():
            return cls._load(path)
        enc = backbone.tokenize(texts, padding="longest")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        if backbone.split_at == 0:  # every layer tuned: nothing frozen to run once
            return cls(ids, mask, None)
        device = next(backbone.parameters()).device
        states = torch.empty(*ids.shape, backbone.hidden_size)
        for first in tqdm(
            range(0, len(texts), batch_size), desc=f"prefix {name}", unit="batch", leave=False, dynamic_ncols=True
        ):
            sl = slice(first, first + batch_size)
            states[sl] = backbone.run_prefix(ids[sl].to(device), mask[sl].to(device)).float().cpu()
        with atomic_path(path) as tmp:
            save_file({"input_ids": ids, "attention_mask": mask, "states": states}, str(tmp))
        return cls(ids, mask, states)

    def lengths(self) -> torch.Tensor:
        """(N,) each text's length in tokens (what length-grouped batches sort by)."""
        return self.attention_mask.sum(dim=1)

    def batch(
        self, index: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Rows `index`, cut to the longest real length among them (padding costs compute)."""
        mask = self.attention_mask[index]
        length = int(mask.sum(dim=1).max())
        states = None if self.states is None else self.states[index, :length].to(device)
        return self.input_ids[index, :length].to(device), mask[:, :length].to(device), states
