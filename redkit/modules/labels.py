"""Which module outputs which label, once a run's label set has changed after stage base.

A run's labels only ever grow by appending (`redkit add-domain` with new labels), so every module
outputs a *prefix* of the run's labels: C the labels of stage base, a head or logit expert the
labels its run had when it was trained. A domain that brought new labels owns a `label_rows`
module for them, and a removed domain's labels are *masked* (`redkit remove-domain`: kept in the
run's label list so that class indices never shift, but no composition can predict them).

    classifier  C(h) (B, C_0)  +  R_a(h) (B, |new of a|)  + ...  ->  (B, C)   JoinedClassifier
        (a removed domain that comes back owns rows for its masked labels: they replace C's columns)
    head / logit expert (B, C_i)  ->  (B, C), the labels it never saw filled  Widened
        heads: -inf (an old domain's head scores a later domain's labels as impossible)
        logit experts: 0 (no correction)
    masked labels -> -inf in every one of them

A run without label rows or masked labels gets its modules back unchanged (`LabelLayout.trivial`),
so Task 1, digits and steps runs compute exactly what they always did.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from redkit.errors import RedkitError

NEG_INF = float("-inf")


@dataclass(frozen=True)
class LabelLayout:
    num_classes: int  # C: every label the run has ever had
    rows: dict[str, list[int]]  # domain -> the class indices its label_rows module outputs, in row order
    masked: list[int]  # classes no composition may predict (a removed domain's own labels)

    @property
    def trivial(self) -> bool:
        return not self.rows and not self.masked


def label_layout(run) -> LabelLayout:
    """The layout a run's config records (`label_rows`: {domain: its new labels}, `removed_labels`);
    a run kind without these fields has the trivial one."""
    space, config = run.space, run.config
    owned = dict(getattr(config, "label_rows", {}) or {})
    index = space.label_index if space.labels else {}
    rows = {domain: [index[label] for label in labels] for domain, labels in owned.items()}
    masked = sorted(index[label] for label in getattr(config, "removed_labels", ()) or ())
    return LabelLayout(space.num_classes, rows, masked)


class JoinedClassifier(nn.Module):
    """C followed by each added domain's label rows: (B, d) -> (B, C); masked labels -inf."""

    def __init__(self, classifier: nn.Module, rows: dict[str, nn.Module], layout: LabelLayout):
        super().__init__()
        self.classifier, self.rows = classifier, nn.ModuleDict(rows)
        self.layout = layout
        # What a Classifier says of itself (REDModel reads dim and num_classes off it): the joined width.
        self.config = replace(classifier.config, num_classes=layout.num_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (..., d) -> (..., C): (B, d), or (B, K, d) per expert
        base = self.classifier(h)  # (..., C_0)
        out = base.new_full((*base.shape[:-1], self.layout.num_classes), NEG_INF)
        out[..., : base.shape[-1]] = base
        for domain, module in self.rows.items():
            out[..., self.layout.rows[domain]] = module(h)
        out[..., self.layout.masked] = NEG_INF
        return out


class Widened(nn.Module):
    """A module whose logits (B, C_i) cover a prefix of the run's labels, widened to (B, C)."""

    def __init__(self, module: nn.Module, layout: LabelLayout, fill: float):
        super().__init__()
        self.module, self.layout, self.fill = module, layout, fill

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (..., d) -> (..., C)
        own = self.module(h)  # (..., C_i)
        out = own.new_full((*own.shape[:-1], self.layout.num_classes), self.fill)
        out[..., : own.shape[-1]] = own
        out[..., self.layout.masked] = NEG_INF
        return out

    def alone_logits(self, h: torch.Tensor, classifier: nn.Module | None = None) -> torch.Tensor:
        return self(h)


def joined_classifier(run, load: Callable[..., nn.Module]) -> nn.Module:
    """The run's effective classifier; `load(*parts)` loads a module under modules/."""
    layout = label_layout(run)
    classifier = load("classifier")
    if layout.trivial:
        return classifier
    rows = {domain: load("label_rows", domain) for domain in layout.rows}
    for domain, module in rows.items():
        if list(module.config.labels) != [run.space.labels[c] for c in layout.rows[domain]]:
            raise RedkitError(
                f"{run.module_dir('label_rows', domain)}: its labels {list(module.config.labels)} are not the "
                f"ones the run gives domain {domain!r}"
            )
    return JoinedClassifier(classifier, rows, layout).to(run.device)


def widened(run, module: nn.Module, fill: float) -> nn.Module:
    """`module` (a head: fill -inf; a logit expert: fill 0) over every label of the run."""
    layout = label_layout(run)
    return module if layout.trivial else Widened(module, layout, fill)
