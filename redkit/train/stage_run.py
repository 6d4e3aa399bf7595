"""What a stage on cached features (experts, heads, router, gate) and a ModuleSet need from a run.

`Run` (redkit/run.py) and its kinds provide it, and so does an ablation variant
(redkit_experiments/study/variant.py), which trains the same stages into a directory of its own. Stage base needs
the whole `Run` (data, backbone, cache); nothing else does.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from redkit.space import LabelSpace

if TYPE_CHECKING:
    from redkit.run.config import StagedConfig


class StageRun(Protocol):
    config: "StagedConfig"  # seed, expert rank, router, per-stage training settings
    device: torch.device
    bundle: dict | None  # a read-only bundle's manifest; None for a run that can be trained into
    monitor: Callable[[str, int, nn.Module], None] | None  # watches a stage train: monitor(stage, step, module)

    @property
    def space(self) -> LabelSpace: ...  # classes and the domains that split them (one expert each)

    @property
    def feature_dim(self) -> int: ...  # d of the pooled features h

    @property
    def fingerprint(self) -> str: ...  # of the backbone the features come from; every module records it

    @property
    def data_hash(self) -> str: ...  # of the training texts; every module records it

    def split_tensors(
        self, name: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...  # (h (N, d), classes (N,), domains (N,))

    def module_dir(self, *parts: str) -> Path: ...  # where a module is read from and written to

    def log(self, row: dict) -> None: ...  # one line of the training log

    def add_time(self, stage: str, seconds: float) -> None: ...  # wall time spent in a stage
