"""A Hugging Face model split at layer L - N into a frozen prefix and a trainable top.

    text ─► tokenizer ─► [embeddings + layers 0 .. L-N-1] ─► prefix states (B, T, d)   (frozen, cached)
                                                              │
                                         [layers L-N .. L-1 (+ final norm)] ─► token states (B, T, d)
                                                              │
                                                pooling (mean | last | cls) ─► h (B, d)

With every layer tuned (N = L, `--trainable-layers all`) there is no frozen layer to cache: the
model runs whole on every pass, its embeddings frozen (as in Lee et al. 2019's finding that they need
no tuning; here it also halves the optimizer's work: the word embeddings are half of MiniLM's weights).

The split works for encoders (BERT-like) and decoders (Qwen3, Llama, ...) alike, without
touching their code: for the prefix pass the model's layer list is cut to its first L-N layers
and a hook captures the last one's output; for the top pass the list holds only the last N
layers and a pre-hook swaps the first one's input for the cached prefix states. Embeddings,
masks and positions are rebuilt by the model itself from the same input ids in both passes.
"""

import contextlib
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from redkit.backbone.locate import check_model_dir, default_backbone_path, fingerprint_files
from redkit.errors import RedkitError

POOLINGS = ("mean", "last", "cls")
PRECISIONS = ("fp32", "bf16")


@dataclass
class BackboneConfig:
    path: str | None = None  # a Hugging Face model directory; None = the embedded all-MiniLM-L6-v2
    pooling: str = "mean"  # mean | last | cls
    trainable_layers: int = 2  # N: the top N layers are fine-tuned in stage base, the rest frozen (N = L: all)
    max_length: int = 64  # tokens; arithmetic questions are far shorter
    precision: str = "fp32"  # fp32 | bf16 (autocast; on CUDA) -- weights and caches stay fp32

    def __post_init__(self):
        if self.pooling not in POOLINGS:
            raise RedkitError(f"unknown pooling {self.pooling!r} (expected one of {', '.join(POOLINGS)})")
        if self.precision not in PRECISIONS:
            raise RedkitError(f"unknown precision {self.precision!r} (expected one of {', '.join(PRECISIONS)})")


def pool(states: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(B, T, d) token states, (B, T) mask -> (B, d): mean over real tokens, the last one, or the first."""
    if pooling == "cls":
        return states[:, 0]
    if pooling == "last":
        last = attention_mask.sum(dim=1) - 1  # right padding: the last real token
        return states[torch.arange(states.shape[0]), last]
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def token_lengths(path: Path, texts: list[str]) -> list[int]:
    """Each text's length in the model's tokens, special tokens included, uncut (what max_length
    is chosen from). Loads the tokenizer only."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.model_max_length = 1 << 30  # counting only: no warning about texts longer than the model
    return [len(ids) for ids in tokenizer(list(texts), add_special_tokens=True)["input_ids"]]


def _find_layers(model: nn.Module, num_layers: int) -> tuple[nn.Module, str]:
    """(parent, attribute) of the ModuleList that holds the model's `num_layers` blocks."""
    for _, module in model.named_modules():
        for attr, child in module.named_children():
            if isinstance(child, nn.ModuleList) and len(child) == num_layers:
                return module, attr
    raise RedkitError(f"cannot find the {num_layers} transformer layers in {type(model).__name__}")


def hash_state(digest, state: dict[str, torch.Tensor]) -> None:
    """Feed a state dict's names and float32 bytes, in name order, into `digest` (what a fingerprint is made of)."""
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())


class Backbone(nn.Module):
    def __init__(self, config: BackboneConfig):
        super().__init__()
        from transformers import AutoModel, AutoTokenizer  # heavy import: only when a backbone is built

        self.config = config
        self.path = Path(config.path) if config.path else default_backbone_path()
        check_model_dir(self.path)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            self.model = AutoModel.from_pretrained(self.path, local_files_only=True, dtype=torch.float32)
        except (OSError, ValueError, KeyError) as err:
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RedkitError(f"--backbone {self.path}: cannot load as a Hugging Face model ({first_line})") from None
        self.tokenizer.padding_side = "right"  # so that `last` pooling can index by length
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        self.hidden_size: int = self.model.config.hidden_size
        num_layers = self.model.config.num_hidden_layers
        if not 1 <= config.trainable_layers <= num_layers:
            raise RedkitError(
                f"trainable_layers = {config.trainable_layers}: must be in 1..{num_layers} "
                f"for a {num_layers}-layer backbone"
            )
        self.split_at = num_layers - config.trainable_layers  # index of the first trainable layer
        self._layer_parent, self._layer_attr = _find_layers(self.model, num_layers)
        self.layers: nn.ModuleList = getattr(self._layer_parent, self._layer_attr)
        self.model.requires_grad_(False)
        self.top_layers.requires_grad_(True)
        self.model.eval()
        self.source_fingerprint = fingerprint_files(self.path)

    # ---- the two halves -------------------------------------------------------------------

    @property
    def top_layers(self) -> nn.ModuleList:
        return self.layers[self.split_at :]

    @contextmanager
    def _only_layers(self, layers: nn.ModuleList) -> Iterator[None]:
        setattr(self._layer_parent, self._layer_attr, layers)
        try:
            yield
        finally:
            setattr(self._layer_parent, self._layer_attr, self.layers)

    def tokenize(self, texts: list[str], padding: bool | str = "longest") -> dict[str, torch.Tensor]:
        enc = self.tokenizer(
            texts, padding=padding, truncation=True, max_length=self.config.max_length, return_tensors="pt"
        )
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    @torch.no_grad()
    def run_prefix(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor | None:
        """(B, T) ids -> (B, T, d) states after the frozen layers (the input of the first trainable
        one); None when every layer is tuned (nothing frozen but the embeddings, cheap to recompute)."""
        if self.split_at == 0:
            return None
        captured: list[torch.Tensor] = []
        # The input of layer split_at is the prefix output: capture it there and stop the pass by
        # running only layers[:split_at + 1]; the one extra layer's output is discarded.
        hook = self.layers[self.split_at].register_forward_pre_hook(
            lambda module, args, kwargs: captured.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True
        )
        try:
            with self._only_layers(self.layers[: self.split_at + 1]):
                self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        finally:
            hook.remove()
        return captured[0]

    def run_top(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        prefix: torch.Tensor | None,
        layers: nn.ModuleList | None = None,
        **model_kwargs,
    ) -> torch.Tensor:
        """Cached (B, T, d) prefix states -> (B, T, d) final token states, through the trainable layers
        (prefix None: every layer is tuned, the whole model runs), or through `layers` in their place (another
        copy of them: a tuned owner's, redkit/fitting/tuned_encoder.py). `model_kwargs` go to the wrapped
        model's call (a peft model's `adapter_names=`, say)."""
        if prefix is None:
            if self.split_at:
                raise RedkitError("run_top: prefix states are needed below the first tuned layer")
            with self._only_layers(layers) if layers is not None else contextlib.nullcontext():
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **model_kwargs)
            return out.last_hidden_state
        layers = self.top_layers if layers is None else layers

        def swap_input(module, args, kwargs):
            if args:
                return (prefix,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": prefix}

        hook = layers[0].register_forward_pre_hook(swap_input, with_kwargs=True)
        try:
            with self._only_layers(layers):
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **model_kwargs)
        finally:
            hook.remove()
        return out.last_hidden_state

    def pool(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, d) token states -> (B, d)."""
        return pool(states, attention_mask, self.config.pooling)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: torch.Tensor | None = None, **model_kwargs
    ) -> torch.Tensor:
        """(B, T) ids -> (B, d) pooled features; pass `prefix` to skip the frozen layers."""
        if prefix is None:
            prefix = self.run_prefix(input_ids, attention_mask)
        return self.pool(self.run_top(input_ids, attention_mask, prefix, **model_kwargs), attention_mask)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast where asked for (mixed precision on a GPU); a no-op in fp32."""
        if self.config.precision == "fp32":
            return contextlib.nullcontext()
        device_type = next(self.parameters()).device.type
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)

    def fingerprint(self) -> str:
        """Identifies the features this backbone computes: source weights, split, pooling and the
        current (possibly fine-tuned) top layers. Modules are only valid for equal fingerprints."""
        digest = hashlib.sha256(f"{self.source_fingerprint}:{self.split_at}:{self.config.pooling}".encode())
        hash_state(digest, self.top_state_dict())
        return digest.hexdigest()[:16]

    # ---- the tuned top, as its own artifact --------------------------------------------

    def top_state_dict(self) -> dict[str, torch.Tensor]:
        return {
            f"layers.{self.split_at + i}.{k}": v
            for i, layer in enumerate(self.top_layers)
            for k, v in layer.state_dict().items()
        }

    def top_config(self, path: bool = True) -> dict:
        """What a saved copy of the top layers says of itself (its module's config): the source weights, where they
        are split, pooling and width; `path` False leaves out this machine's path to them (a tuned owner's top, which
        leaves its machine)."""
        where = {"source_path": str(self.path)} if path else {}
        return {
            "source_fingerprint": self.source_fingerprint,
            **where,
            "split_at": self.split_at,
            "pooling": self.config.pooling,
            "dim": self.hidden_size,
        }

    def load_top_state_dict(self, state: dict[str, torch.Tensor], layers: nn.ModuleList | None = None) -> None:
        """`state` (top_state_dict's keys) into the top layers, or into `layers`, another copy of them."""
        for i, layer in enumerate(self.top_layers if layers is None else layers):
            prefix = f"layers.{self.split_at + i}."
            layer.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
