"""What the API answers for one text (redkit.load(RUN).predict)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Prediction:
    label: str | int  # the predicted class (an int where the run's labels are all integers)
    probability: float | None  # the composition's probability of that label (None: a steps run's executed chain)
    weights: dict[str, float]  # expert weight by domain name (a steps run: its last step's)
    steps: list = field(default_factory=list)  # a steps run's executed steps (StepTrace), in order
    program: object = None  # a steps run's decomposed Program
    out_of_scope: bool | None = None  # under the run's OOS threshold for this composition (None: the run has none)
