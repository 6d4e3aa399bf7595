"""What every staged run is configured by, and how a run's recorded config is read back.

    StagedConfig  seed, device, expert rank, router (and what it is trained on), references, and the
                  training settings of every stage (TrainConfig defaults + per-stage overrides)
    TextConfig    + the backbone and stage base's share of train: a run on texts (fit, Task 1/2)

A config is written to <run>/config.json once; a run opened again with another config is refused
(`first_difference` names the first setting that differs).
"""

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass

from redkit.backbone import BackboneConfig
from redkit.train.loop import TrainConfig

# Learning rates and epoch caps per stage, on top of TrainConfig's defaults (lr 1e-4, batch 16,
# virtual batch 64, patience 3, max 60 epochs). Chosen so that `make demo` fits in 10 minutes on a
# 2-core CPU: stage base fine-tunes two pretrained layers (small steps) under a fresh classifier
# (larger steps); the other stages train small modules from scratch on cached features, where lr
# 1e-4 would need far more than 60 epochs. A micro-batch of 64 with a virtual batch of 64 computes
# the same gradient as the paper's 16 x 4 accumulation, in a quarter of the Python calls.
DEFAULT_STAGE_OVERRIDES = {
    "base": {"lr": 4e-4, "head_lr": 4e-3, "max_epochs": 15, "batch_size": 64},
    "joint": {"lr": 4e-4, "head_lr": 4e-3, "max_epochs": 15, "batch_size": 64},  # stage base's recipe on all of train
    "experts": {"lr": 1e-3, "batch_size": 64},
    "heads": {"lr": 1e-3, "batch_size": 64},
    "router": {"lr": 1e-3, "batch_size": 64},
    "gate": {"lr": 1e-3, "batch_size": 64},
}


@dataclass
class StagedConfig:
    """What every staged run has: a seed, a device, expert width and per-stage training settings."""

    seed: int = 0
    expert_rank: int = 0  # r of the residual experts; 0 = d // 4
    device: str = "cpu"
    router: str = "dense"  # a ROUTERS name: the router and the gate of stages router / gate (dense: softmax MLP)
    router_options: dict = field(
        default_factory=dict
    )  # the router's own settings (dense: hidden, temperature; labels: source)
    # What RED's router is trained on, experts and C frozen (ROUTER_LOSSES): the domain label (the paper's),
    # the label loss of the composition it routes, or both summed.
    router_loss: str = "domain"
    references: tuple[
        str, ...
    ] = ()  # REFERENCES names trained and scored beside the compositions (joint, linear_probe)
    train: TrainConfig = field(default_factory=TrainConfig)
    stage_overrides: dict[str, dict] = field(default_factory=lambda: json.loads(json.dumps(DEFAULT_STAGE_OVERRIDES)))

    def cap_epochs(self, max_epochs: int | None, stages: tuple[str, ...] | None = None) -> None:
        """Cap the epochs of `stages` (default every one, references included: quick runs); None
        leaves each stage's own cap."""
        if max_epochs is not None:
            for stage in stages or ("base", "experts", "heads", "router", "gate", "joint", "owners"):
                self.stage_overrides.setdefault(stage, {})["max_epochs"] = max_epochs

    def train_config(self, stage: str) -> TrainConfig:
        return TrainConfig(**(asdict(self.train) | self.stage_overrides.get(stage, {})))

    @classmethod
    def from_dict(cls, raw: dict) -> "StagedConfig":
        """The inverse of asdict: nested dataclasses rebuilt, JSON lists back to tuples. Settings
        this class lacks are refused: they mean another benchmark's run (a digits run opened as a
        Task 1 run would otherwise silently get Task 1's defaults)."""
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"settings {', '.join(unknown)} are not {cls.__name__}'s; is it another benchmark's run?")
        kwargs = {}
        for f in fields(cls):
            if f.name in raw:
                value = raw[f.name]
                if hasattr(f.type, "from_dict"):  # a config with configs inside (the steps run's decomposer)
                    value = f.type.from_dict(value)
                elif is_dataclass(f.type):
                    value = f.type(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in value.items()})
                kwargs[f.name] = value
        return cls(**kwargs)


@dataclass
class TextConfig(StagedConfig):
    """A run on texts through a Hugging Face backbone: its settings, and stage base's share of train."""

    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    base_fraction: float = 0.1  # of train, domain-balanced, for stage base (the paper's weak global head)
    base_val_examples: int | None = (
        None  # stage base's per-epoch validation: all of val, or this many (domain-balanced)
    )


def first_difference(a: dict, b: dict, prefix: str = "") -> str | None:
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            found = first_difference(x, y, f"{prefix}{key}.")
            if found:
                return found
        elif x != y and not (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and list(x) == list(y)):
            return f"{prefix}{key}: {x!r} in the run, {y!r} asked for"
    return None
