"""What a method of the study may read, and nothing more: the study holds every split of every step (study.py:
StudyContext), and hands a method

    StepData     at step t: step t's train and val examples (features, frozen-layer states, texts, classes);
                 no other step's, and no test query (asking for another split raises)
    Examples     to score: the queries' features and states, without their classes

so a method cannot read a domain before it arrives, nor after, unless it copied what it keeps (and then counts
it: base.py's Kept). Examples are copies, not views of the study's tensors: what a method holds is what it kept.

Axes: N examples, T tokens (the split's longest, at most the study's max_length), d hidden size.
"""

from dataclasses import dataclass

import torch

from redkit.errors import RedkitError
from redkit.features import PrefixStates

LABEL_BYTES = 8  # a stored example's label: one int64


@dataclass
class Examples:
    """Some examples of one split: the pretrained backbone's pooled features and frozen-layer states (what every
    method computes from), their texts, and their classes where the holder may know them (None: queries)."""

    features: torch.Tensor  # (N, d)
    prefix: PrefixStates  # token ids and mask (N, T), frozen-layer states (N, T, d)
    texts: tuple[str, ...]
    classes: torch.Tensor | None  # (N,) indices into the stream's classes

    def __len__(self) -> int:
        return len(self.features)

    def subset(self, index: torch.Tensor | list[int]) -> "Examples":
        """A copy of rows `index`."""
        index = torch.as_tensor(index, dtype=torch.long)
        p = self.prefix
        prefix = PrefixStates(
            p.input_ids[index], p.attention_mask[index], None if p.states is None else p.states[index]
        )
        return Examples(
            self.features[index].clone(),
            prefix,
            tuple(self.texts[i] for i in index.tolist()),
            None if self.classes is None else self.classes[index].clone(),
        )

    def batch(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Every row, as the backbone's top layers read them: cut to the longest real length (padding costs)."""
        return self.prefix.batch(torch.arange(len(self)), device)

    def lengths(self) -> torch.Tensor:
        """(N,) each text's length in tokens."""
        return self.prefix.lengths()

    def stored_bytes(self) -> int:
        """What keeping these examples costs: each text in UTF-8 and its label (the states are recomputed)."""
        return sum(len(text.encode()) + LABEL_BYTES for text in self.texts)

    @staticmethod
    def concat(parts: list["Examples"]) -> "Examples":
        """Rows of several holders one after another, the states padded to the longest T."""
        parts = [p for p in parts if len(p)]
        if not parts:
            raise RedkitError("no examples to put together")
        width = max(p.prefix.input_ids.shape[1] for p in parts)

        def pad(t: torch.Tensor) -> torch.Tensor:  # (N, T, ...) -> (N, width, ...)
            extra = width - t.shape[1]
            return t if not extra else torch.cat([t, t.new_zeros(t.shape[0], extra, *t.shape[2:])], dim=1)

        states = None if parts[0].prefix.states is None else torch.cat([pad(p.prefix.states) for p in parts])
        prefix = PrefixStates(
            torch.cat([pad(p.prefix.input_ids) for p in parts]),
            torch.cat([pad(p.prefix.attention_mask) for p in parts]),
            states,
        )
        classes = None if any(p.classes is None for p in parts) else torch.cat([p.classes for p in parts])
        return Examples(
            torch.cat([p.features for p in parts]), prefix, tuple(t for p in parts for t in p.texts), classes
        )


@dataclass(frozen=True)
class StepData:
    """Step t's data, all a method may read while it learns step t."""

    t: int
    name: str  # the domain, or "task07"
    classes: tuple[int, ...]  # the step's classes (indices into the stream's classes), sorted
    train: Examples
    val: Examples

    def __getitem__(self, split: str) -> Examples:
        if split not in ("train", "val"):
            raise RedkitError(f"step {self.t + 1} ({self.name}) holds its train and val examples only, not {split!r}")
        return getattr(self, split)

    def local(self, classes: torch.Tensor) -> torch.Tensor:
        """(N,) class indices of the stream -> (N,) indices within this step's classes."""
        return torch.searchsorted(torch.tensor(self.classes), classes)
