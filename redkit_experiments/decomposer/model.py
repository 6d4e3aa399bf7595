"""The step decomposer: a question's text -> its step program, every number copied from the text.

    text ──► numbers v_1..v_n (regex, text order)                        nothing computed: copied
      │
      └► backbone ──► token states (B, T, d) ──► per number i: [s(num_i), s(before), s(after), mean]
                                                   (B, M, 4d)
                                                     │ MLP
                                                     ▼ e_i (B, M, E)
                      order score t_i = i + δ(e_i)            operator logits (B, M, K)
                                                     │
    decode: the operands, in execution order, are the numbers sorted by t (a permutation: every
            number used exactly once); step k applies the operator of its number; n numbers give
            n - 1 steps, and the program is built through redkit_experiments.arithmetic.programs, so it is well-formed.

The order score starts from the number's position in the text and the head learns only an offset:
text order is the default and a phrasing that reorders ("If you subtract 5 from 12 ...": 12 is
the first operand) moves a number by a learned amount. Decoding by sorting is the exact argmax
of the Plackett-Luce model the pairwise loss trains, so it needs no search and no repair.

Axes: B texts, T tokens, M numbers per text (padded), d backbone width, E head width, K operators.
"""

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from redkit.backbone import Backbone, BackboneConfig
from redkit.errors import RedkitError
from redkit_experiments.arithmetic.expression import OPERATORS
from redkit_experiments.arithmetic.programs import Program, Step, render_program, variable

NUMBER = re.compile(r"\d+")
KIND = "decomposer"
TOP_PREFIX = "top."  # tuned backbone layers, when the decomposer fine-tuned them, are saved under this prefix


def number_spans(text: str) -> list[tuple[int, int, int]]:
    """(value, start, end) of every number in the text, in text order."""
    return [(int(m.group()), m.start(), m.end()) for m in NUMBER.finditer(text)]


def extract_numbers(text: str) -> list[int]:
    """The numbers of a text, in text order: the only operands a decomposed program may use."""
    return [value for value, _, _ in number_spans(text)]


# ---- numbers -> token positions --------------------------------------------------------------------

Positions = list[list[tuple[int, int]]]  # per text, per number: (first token, last token) of the number


def number_positions(backbone: Backbone, texts: Sequence[str]) -> Positions:
    """Token positions of each text's numbers, from the tokenizer's character offsets.

    The tokenization is the backbone's own (same truncation), so the positions index the states
    of `backbone.tokenize(texts)`. A number cut off by truncation points at the last real token.
    """
    if not getattr(backbone.tokenizer, "is_fast", False):
        raise RedkitError(f"backbone {backbone.path}: the decomposer needs a fast tokenizer (character offsets)")
    enc = backbone.tokenizer(
        list(texts), truncation=True, max_length=backbone.config.max_length, return_offsets_mapping=True
    )
    out: Positions = []
    for text, offsets in zip(texts, enc["offset_mapping"]):
        real = [k for k, (a, b) in enumerate(offsets) if b > a]  # special tokens have empty spans
        last_real = real[-1] if real else 0
        spans = []
        for _, start, end in number_spans(text):
            inside = [k for k in real if offsets[k][0] < end and offsets[k][1] > start]
            spans.append((inside[0], inside[-1]) if inside else (last_real, last_real))
        out.append(spans)
    return out


def gather_features(
    states: torch.Tensor, attention_mask: torch.Tensor, positions: Positions
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, d) token states -> (B, M, 4d) number features [number, token before, token after, mean], (B, M) mask."""
    B, T, d = states.shape
    M = max((len(p) for p in positions), default=0)
    first = torch.zeros(B, M, dtype=torch.long)
    last = torch.zeros(B, M, dtype=torch.long)
    mask = torch.zeros(B, M, dtype=torch.bool)
    for b, spans in enumerate(positions):
        if spans:
            first[b, : len(spans)] = torch.tensor([s for s, _ in spans])
            last[b, : len(spans)] = torch.tensor([e for _, e in spans])
            mask[b, : len(spans)] = True
    lengths = attention_mask.sum(dim=1, keepdim=True).to(first.device)  # (B, 1)
    before = (first - 1).clamp(min=0)
    after = torch.minimum(last + 1, (lengths - 1).clamp(min=0))
    device = states.device

    def at(index: torch.Tensor) -> torch.Tensor:  # (B, M) -> (B, M, d)
        return states.gather(1, index.to(device).unsqueeze(-1).expand(B, M, d))

    am = attention_mask.to(states.dtype).unsqueeze(-1)
    mean = (states * am).sum(dim=1) / am.sum(dim=1).clamp(min=1.0)  # (B, d)
    features = torch.cat([at(first), at(before), at(after), mean.unsqueeze(1).expand(B, M, d)], dim=-1)
    return features * mask.to(device).unsqueeze(-1), mask.to(device)


# ---- the head --------------------------------------------------------------------------------------


@dataclass
class HeadConfig:
    dim: int  # d, the backbone's hidden size
    operators: tuple[str, ...] = ("+", "-")
    hidden: int = 256
    width: int = 128  # E
    dropout: float = 0.1
    order_scale: float = 4.0  # a one-position difference in t is a pairwise logit of this size

    def __post_init__(self):
        self.operators = tuple(self.operators)
        if unknown := set(self.operators) - set(OPERATORS):
            raise RedkitError(f"unknown operators {sorted(unknown)} (known: {' '.join(OPERATORS)})")


class HeadOutput(NamedTuple):
    order: torch.Tensor  # (B, M) t_i: execution position score, text position + learned offset
    op_logits: torch.Tensor  # (B, M, K)
    mask: torch.Tensor  # (B, M) real numbers


class DecomposerHead(nn.Module):
    Config = HeadConfig

    def __init__(self, config: HeadConfig):
        super().__init__()
        self.config = config
        self.encode = nn.Sequential(
            nn.Linear(4 * config.dim, config.hidden),
            nn.GELU(),
            nn.Dropout(config.dropout),
            nn.Linear(config.hidden, config.width),
            nn.GELU(),
        )
        self.offset = nn.Linear(config.width, 1)
        self.op = nn.Linear(config.width, len(config.operators))

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> HeadOutput:
        e = self.encode(features)  # (B, M, E)
        position = torch.arange(features.shape[1], device=features.device, dtype=e.dtype)
        return HeadOutput(position + self.offset(e).squeeze(-1), self.op(e), mask)

    def loss(self, out: HeadOutput, slots: torch.Tensor, ops: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """slots (B, M): each number's execution position (-100 padding); ops (B, M): operator index,
        -100 for the first operand (no operator) and padding. Returns the loss and its parts."""
        real = out.mask
        pair = real.unsqueeze(2) & real.unsqueeze(1) & ~torch.eye(real.shape[1], dtype=torch.bool, device=real.device)
        logits = self.config.order_scale * (out.order.unsqueeze(1) - out.order.unsqueeze(2))  # [i, j]: i before j
        before = (slots.unsqueeze(2) < slots.unsqueeze(1)).to(logits.dtype)
        order = F.binary_cross_entropy_with_logits(logits[pair], before[pair]) if pair.any() else logits.sum() * 0
        op = (
            F.cross_entropy(out.op_logits.reshape(-1, out.op_logits.shape[-1]), ops.reshape(-1), ignore_index=-100)
            if (ops >= 0).any()
            else out.op_logits.sum() * 0
        )
        return order + op, {"order": order.detach().item(), "op": op.detach().item()}


# ---- constrained decoding --------------------------------------------------------------------------


def decode(
    values: Sequence[int], order: Sequence[float], op_logits: Sequence[Sequence[float]], operators: Sequence[str]
) -> Program:
    """Numbers in text order + scores -> the program: operands are the numbers sorted by `order`
    (each used exactly once, ties kept in text order), step k applies its number's best operator."""
    n = len(values)
    if n < 2:
        raise RedkitError(f"cannot decompose a text with {n} number{'s' if n != 1 else ''}: a program needs at least 2")
    if len(order) < n or len(op_logits) < n:
        raise ValueError(f"scores for {min(len(order), len(op_logits))} numbers, {n} numbers in the text")
    sequence = sorted(range(n), key=lambda i: (float(order[i]), i))
    ops = [operators[max(range(len(operators)), key=lambda k: float(op_logits[i][k]))] for i in sequence[1:]]
    operands = [int(values[i]) for i in sequence]
    steps = [Step(operands[0], ops[0], operands[1], variable(1))]
    steps += [Step(variable(k - 1), ops[k - 1], operands[k], variable(k)) for k in range(2, n)]
    return Program(tuple(steps), variable(n - 1))


# ---- the whole model -------------------------------------------------------------------------------


@dataclass
class DecomposerModelConfig:
    """What config.json records: enough to rebuild the model around the same backbone."""

    head: dict
    backbone_path: str | None = None  # None: the embedded default backbone
    trainable_layers: int = 2  # where the backbone is split (its top is tuned only if tuned_top)
    max_length: int = 64
    tuned_top: bool = False  # whether model.safetensors holds fine-tuned top layers


class StepDecomposer(nn.Module):
    """Backbone + head. `predict(texts)` -> Programs; `save(dir)` / `StepDecomposer.load(dir)`."""

    def __init__(self, backbone: Backbone, head: DecomposerHead, tuned_top: bool = False):
        super().__init__()
        self.backbone, self.head, self.tuned_top = backbone, head, tuned_top

    @property
    def operators(self) -> tuple[str, ...]:
        return self.head.config.operators

    def token_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        if prefix is None:
            prefix = self.backbone.run_prefix(input_ids, attention_mask)
        with self.backbone.autocast():
            return self.backbone.run_top(input_ids, attention_mask, prefix).float()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: Positions,
        prefix: torch.Tensor | None = None,
    ) -> HeadOutput:
        states = self.token_states(input_ids, attention_mask, prefix)
        return self.head(*gather_features(states, attention_mask, positions))

    @torch.inference_mode()
    def predict(self, texts: Sequence[str], batch_size: int = 128) -> list[Program]:
        """One well-formed program per text; a text with fewer than two numbers raises RedkitError."""
        texts = list(texts)
        for text in texts:
            if len(extract_numbers(text)) < 2:
                decode(extract_numbers(text), [], [], self.operators)  # raises the one-line error
        was_training = self.training
        self.eval()
        device = next(self.head.parameters()).device
        programs: list[Program] = []
        for first in range(0, len(texts), batch_size):
            chunk = texts[first : first + batch_size]
            enc = self.backbone.tokenize(chunk)
            out = self(
                enc["input_ids"].to(device), enc["attention_mask"].to(device), number_positions(self.backbone, chunk)
            )
            order, op_logits = out.order.cpu().tolist(), out.op_logits.cpu().tolist()
            programs += [
                decode(extract_numbers(text), order[b], op_logits[b], self.operators) for b, text in enumerate(chunk)
            ]
        self.train(was_training)
        return programs

    def decompose(self, text: str) -> str:
        """The canonical program text of one question."""
        return render_program(self.predict([text])[0])

    # ---- as a module directory ------------------------------------------------------------------

    def model_config(self) -> DecomposerModelConfig:
        bc = self.backbone.config
        return DecomposerModelConfig(
            head=asdict(self.head.config) | {"operators": list(self.operators)},
            backbone_path=bc.path,
            trainable_layers=bc.trainable_layers,
            max_length=bc.max_length,
            tuned_top=self.tuned_top,
        )

    def save(
        self,
        path: str | Path,
        backbone_fingerprint: str,
        metrics: dict | None = None,
        seed: int = 0,
        data_hash: str = "",
    ) -> None:
        """config.json + model.safetensors. `backbone_fingerprint` is the fingerprint of the backbone
        *as loaded* (before any tuning): loading refuses any other backbone."""
        from redkit.modules.store import ModuleMeta, save_module

        state = {k: v for k, v in self.head.state_dict().items()}
        if self.tuned_top:
            state |= {TOP_PREFIX + k: v for k, v in self.backbone.top_state_dict().items()}
        save_module(
            path,
            state,
            ModuleMeta(
                kind=KIND,
                config=asdict(self.model_config()),
                backbone_fingerprint=backbone_fingerprint,
                seed=seed,
                data_hash=data_hash,
                metrics=metrics or {},
            ),
        )

    @classmethod
    def load(cls, path: str | Path, backbone: Backbone | None = None) -> "StepDecomposer":
        """Rebuild from a module directory; `backbone` defaults to the one it was trained with.
        A backbone with another fingerprint (other weights, split or pooling) is refused."""
        from redkit.modules.store import load_state, read_meta

        meta = read_meta(path)
        if meta.kind != KIND:
            raise RedkitError(f"{path}: a {meta.kind} module, not a {KIND}")
        try:
            config = DecomposerModelConfig(**meta.config)
            head_config = HeadConfig(**config.head)
        except TypeError as err:
            raise RedkitError(f"{path}: not a decomposer config ({err})") from None
        if backbone is None:
            backbone = Backbone(
                BackboneConfig(
                    path=config.backbone_path, trainable_layers=config.trainable_layers, max_length=config.max_length
                )
            )
        state, meta = load_state(path, backbone.fingerprint())
        head = DecomposerHead(head_config)
        try:
            head.load_state_dict({k: v for k, v in state.items() if not k.startswith(TOP_PREFIX)})
            if config.tuned_top:
                backbone.load_top_state_dict(
                    {k[len(TOP_PREFIX) :]: v for k, v in state.items() if k.startswith(TOP_PREFIX)}
                )
        except RuntimeError as err:
            raise RedkitError(f"{path}: weights do not fit this decomposer ({str(err).splitlines()[0]})") from None
        model = cls(backbone, head, tuned_top=config.tuned_top)
        model.eval()
        return model
