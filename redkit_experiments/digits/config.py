"""Settings of a digits run: where the images come from, how they are split, the backbone's size
and per-stage training settings (on top of StagedConfig's seed, device and expert rank)."""

import copy
from dataclasses import dataclass, field

from redkit.errors import RedkitError
from redkit.run import StagedConfig
from redkit.train.loop import TrainConfig
from redkit_experiments.digits.backbone import MLPBackboneConfig

# Every module here is tiny and every epoch takes milliseconds (1,293 training images of 64 pixels
# by default), so epochs are cheap and the caps are generous: early stopping on validation loss
# (patience 10; the 144-image validation split is noisy) decides, not the cap. lr 1e-3 for modules
# trained from scratch; base trains on ~130 images, hence its smaller batch (more steps per epoch).
DIGITS_STAGE_OVERRIDES = {
    "base": {"lr": 1e-3, "batch_size": 16, "virtual_batch_size": 16, "max_epochs": 200},
    "experts": {"lr": 1e-3, "batch_size": 32, "virtual_batch_size": 32, "max_epochs": 200},
    "heads": {"lr": 1e-3, "batch_size": 32, "virtual_batch_size": 32, "max_epochs": 200},
    "router": {"lr": 1e-3, "batch_size": 32, "virtual_batch_size": 32, "max_epochs": 200},
    "gate": {"lr": 1e-3, "batch_size": 32, "virtual_batch_size": 32, "max_epochs": 200},
}
STAGE_NAMES = tuple(DIGITS_STAGE_OVERRIDES)


@dataclass
class DigitsConfig(StagedConfig):
    task: str = "digits"  # what open_run knows the run by (redkit/run/kinds.py)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(patience=10))
    stage_overrides: dict[str, dict] = field(default_factory=lambda: copy.deepcopy(DIGITS_STAGE_OVERRIDES))
    data_dir: str | None = None  # four MNIST IDX files; None = scikit-learn's 8x8 digits (embedded)
    test_ratio: float = 0.2  # scikit-learn digits only (stratified); MNIST ships its own test set
    val_ratio: float = 0.1  # of the training images, stratified by digit, for early stopping
    base_ratio: float = 0.1  # of the training split, stratified by digit, for stage base (the weak global head)
    data_seed: int | None = None  # of the splits above; None = `seed` (replicates over seeds fix it: same data)
    backbone: MLPBackboneConfig = field(default_factory=MLPBackboneConfig)

    def __post_init__(self) -> None:
        for name, value, top in (("test_ratio", self.test_ratio, 1.0), ("val_ratio", self.val_ratio, 1.0)):
            if not 0.0 < value < top:
                raise RedkitError(f"{name} must be strictly between 0 and 1, not {value}")
        if not 0.0 < self.base_ratio <= 1.0:
            raise RedkitError(f"base_ratio must be in (0, 1], not {self.base_ratio}")

    @property
    def split_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    def set_for_stages(self, stages: tuple[str, ...] = STAGE_NAMES, **values) -> None:
        """Set training values (batch_size=..., max_epochs=...) for the given stages, over the defaults."""
        for stage in stages:
            self.stage_overrides.setdefault(stage, {}).update(values)
