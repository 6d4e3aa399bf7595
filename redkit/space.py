"""What a run predicts (its classes) and how its data is divided among experts (its domains).

Task 1 predicts 99 exact answers with one expert per answer range; the digits benchmark predicts
10 digits with one expert per label pair; decomposed execution predicts answers with one expert
per operation. The stages and compositions only ever ask a run for its `LabelSpace`.
"""

from dataclasses import dataclass

from redkit.data.vocabulary import NUM_CLASSES, SHORT_NAMES


@dataclass(frozen=True)
class LabelSpace:
    num_classes: int  # C
    domains: tuple[str, ...]  # one expert per domain; the names are also module directory names

    @property
    def num_domains(self) -> int:  # K
        return len(self.domains)


ANSWER_RANGES = LabelSpace(num_classes=NUM_CLASSES, domains=SHORT_NAMES)
