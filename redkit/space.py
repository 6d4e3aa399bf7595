"""What a run predicts (its classes) and how its data is divided among experts (its domains).

Task 1 predicts 99 exact answers with one expert per answer range; the digits benchmark predicts
10 digits with one expert per label pair; decomposed execution predicts every value a step of a
chain can take (-148..200) with one expert per operation. The stages and compositions only ever
ask a run for its `LabelSpace`.

Classes are consecutive integer values: class c stands for the value `first_value + c` (answers
2..100: first_value 2; digits 0..9: first_value 0).
"""

from dataclasses import dataclass

from redkit.data.vocabulary import MIN_ANSWER, NUM_CLASSES, SHORT_NAMES
from redkit.errors import RedkitError


@dataclass(frozen=True)
class LabelSpace:
    num_classes: int  # C
    domains: tuple[str, ...]  # one expert per domain; the names are also module directory names
    first_value: int = 0  # the value of class 0

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
        low, high = self.value_range
        if not low <= value <= high:
            raise RedkitError(f"{where + ': ' if where else ''}answer {value} is outside this run's classes {low}..{high}")
        return value - self.first_value

    def value_of(self, cls):
        """The value of a class: an int, or elementwise for a numpy array or tensor of classes."""
        return cls + self.first_value


ANSWER_RANGES = LabelSpace(num_classes=NUM_CLASSES, domains=SHORT_NAMES, first_value=MIN_ANSWER)
