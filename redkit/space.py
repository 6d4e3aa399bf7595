"""What a run predicts (its classes) and how its data is divided among experts (its domains).

A text run predicts its labels with one expert per domain found in the data; the paper's
benchmarks predict values (Task 1: 99 exact answers with one expert per answer range). The stages
and compositions only ever ask a run for its `LabelSpace`.

Classes are consecutive integer values: class c stands for the value `first_value + c` (answers
2..100: first_value 2; digits 0..9: first_value 0), or, in a run fitted on someone's labelled
text (`redkit fit`), names: class c stands for `labels[c]`, and the domains come from the data.
"""

from dataclasses import dataclass, replace

import numpy as np

from redkit.errors import RedkitError


@dataclass(frozen=True)
class LabelSpace:
    num_classes: int  # C
    domains: tuple[str, ...]  # one expert per domain; the names are also module directory names
    first_value: int = 0  # the value of class 0
    equal_parts: bool = False  # the domains are K contiguous runs of classes of equal width (`in_equal_parts`)
    labels: tuple[str, ...] = ()  # when given, class c stands for labels[c] (and first_value is unused)
    # Where every class belongs to exactly one domain (answer ranges, CLINC150's intents): the
    # domain index of each class (C,), -1 for a removed domain's; empty where a label occurs in several domains.
    class_domains: tuple[int, ...] = ()

    @classmethod
    def of_labels(
        cls, labels: tuple[str, ...], domains: tuple[str, ...], label_domains: tuple[str, ...] = ()
    ) -> "LabelSpace":
        """The space whose classes are named labels (a fit run's, in the order recorded in the run);
        `label_domains`: the one domain of each label, where each has one."""
        return cls(
            num_classes=len(labels),
            domains=tuple(domains),
            labels=tuple(labels),
            class_domains=tuple(domains.index(d) if d in domains else -1 for d in label_domains),
        )

    def domain_mask(self):
        """(K, C) bool tensor: class c belongs to domain k. A RedkitError where labels are shared."""
        import torch

        if not self.class_domains:
            raise RedkitError(
                "this run's labels do not each belong to one domain, so no composition can "
                "split its classes among the experts (red_per_domain)"
            )
        # a class of a removed domain (-1: redkit remove-domain) belongs to none
        return torch.tensor(self.class_domains)[None, :] == torch.arange(self.num_domains)[:, None]

    @classmethod
    def of_values(cls, low: int, high: int, domains: tuple[str, ...]) -> "LabelSpace":
        """The space whose classes are the values low..high (inclusive)."""
        return cls(num_classes=high - low + 1, domains=domains, first_value=low)

    @property
    def num_domains(self) -> int:  # K
        return len(self.domains)

    @property
    def value_range(self) -> tuple[int, int]:
        """(lowest, highest) value a class stands for, inclusive."""
        return self.first_value, self.first_value + self.num_classes - 1

    def class_of(self, value: int, where: str = "") -> int:
        """The class of `value`; a value no class stands for is an error naming `where`."""
        if self.labels:
            if value not in self.label_index:
                raise RedkitError(f"{where + ': ' if where else ''}label {value!r} is not one of this run's classes")
            return self.label_index[value]
        low, high = self.value_range
        if not low <= value <= high:
            raise RedkitError(
                f"{where + ': ' if where else ''}answer {value} is outside this run's classes {low}..{high}"
            )
        return value - self.first_value

    def in_equal_parts(self, k: int) -> "LabelSpace":
        """The same classes divided among k experts, each a contiguous run of classes of (nearly)
        equal width: domain of class c = floor(c k / C) (`--experts K`, and the study of K)."""
        if not 2 <= k <= self.num_classes:
            raise RedkitError(
                f"--experts {k}: the number of experts must be between 2 and {self.num_classes} (the classes)"
            )
        return replace(
            self,
            domains=tuple(f"part{i + 1}of{k}" for i in range(k)),
            equal_parts=True,
            class_domains=tuple(c * k // self.num_classes for c in range(self.num_classes)),
        )

    def domain_of_class(self, cls):
        """Domain of a class (int, numpy array or tensor) in a space made by `in_equal_parts`."""
        if not self.equal_parts:
            raise RedkitError("domain_of_class needs equal-width domains; this space's domains come from the data")
        return cls * self.num_domains // self.num_classes

    def value_of(self, cls):
        """The value of a class: an int, or elementwise for a numpy array or tensor of classes.
        With labels, the label (a str, or a numpy array of them); class -1, which a fit run gives
        an evaluated label it never saw in training, stands for UNSEEN."""
        if self.labels:
            names = np.asarray(self.labels + (UNSEEN,))  # index -1 is UNSEEN
            return str(names[cls]) if isinstance(cls, int) else names[np.asarray(cls)]
        return cls + self.first_value

    def class_names(self) -> tuple[str, ...]:
        """Every class's name, in class order: its label, or its value written out."""
        return self.labels or tuple(str(self.value_of(c)) for c in range(self.num_classes))

    @property
    def label_index(self) -> dict[str, int]:
        index = self.__dict__.get("_label_index")
        if index is None:  # frozen dataclass: cached by hand
            index = {label: c for c, label in enumerate(self.labels)}
            object.__setattr__(self, "_label_index", index)
        return index


UNSEEN = "<unseen label>"  # the value of class -1: an evaluated label the run was never trained on
