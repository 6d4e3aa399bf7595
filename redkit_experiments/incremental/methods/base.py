"""What every method of the study is: it learns one step at a time from that step's data only, answers
for every class seen so far, and declares what it keeps from earlier steps.

    learn(step)       train on step t: `step` (data.py: StepData) holds step t's train and val examples and
                      nothing else; whatever the method needs of earlier steps it must have kept
    scores(queries)   (N, C) scores over every class for queries (data.py: Examples without their classes);
                      the study masks the classes not yet seen
    kept()            what it holds from earlier steps beside the model that predicts, counted

A method is built with the Setting (what it knows before any data: the settings, how many classes there will
be and their names, the pretrained backbone, the shared random map), never with the study's data.

Methods register by name in METHODS (`--method NAME`, repeatable), as the library's registries do.
"""

from dataclasses import asdict, dataclass

import torch

from redkit.backbone import Backbone, BackboneConfig
from redkit.incremental.projection import RandomProjection
from redkit.registry import Registry
from redkit_experiments.incremental.data import Examples, StepData

METHODS: Registry[type] = Registry("method", aliases={"ncm": "simplecil"})  # nearest class mean: SimpleCIL


def register_method(name: str):
    def add(cls):
        cls.name = name
        METHODS.register(name)(cls)
        return cls

    return add


@dataclass
class Kept:
    """What a method keeps from earlier steps, beside the model it predicts with: counted in examples and bytes.

        examples      stored training examples (their text and label; DER++ also their logits)
        features      stored pooled features of earlier steps' examples (a router retrained on them: replay)
        statistics    class means, counts, scatter or Fisher matrices: numbers computed from the data
        weights       copies of earlier models (LwF's teacher, EWC's anchor)

    `from_data_bytes` is what of it is earlier steps' data or numbers computed directly from it (examples,
    features, statistics), as opposed to weights trained on it: what a reader asks of a replay-free method.
    """

    examples: int = 0
    example_bytes: int = 0
    features: int = 0
    feature_bytes: int = 0
    statistics_bytes: int = 0
    weight_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.example_bytes + self.feature_bytes + self.statistics_bytes + self.weight_bytes

    @property
    def from_data_bytes(self) -> int:
        return self.example_bytes + self.feature_bytes + self.statistics_bytes

    def as_dict(self) -> dict:
        return asdict(self) | {"bytes": self.bytes, "from_data_bytes": self.from_data_bytes}


def tensor_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def module_bytes(*modules: torch.nn.Module) -> int:
    return sum(tensor_bytes(*module.state_dict().values()) for module in modules)


@dataclass
class Setting:
    """What a method knows before any data arrives."""

    config: object  # study.py: IncrementalConfig (its seed, budgets, the settings of every method)
    class_names: tuple[str, ...]  # (C,) every class the stream will bring (the one head's rows), by name
    num_steps: int  # how many steps the stream has (joint retrains at some of them)
    dim: int  # d, the backbone's hidden size
    device: torch.device
    projection: RandomProjection  # the random features φ(h) everyone can regenerate from a seed
    backbone_config: BackboneConfig

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def pretrained_backbone(self) -> Backbone:
        """A fresh copy of the pretrained backbone (its top `trainable_layers` layers trainable)."""
        return Backbone(self.backbone_config).to(self.device)


class Method:
    """The base class: subclasses give `learn`, `scores` and, where they keep anything, `kept`."""

    name = ""
    # What it keeps, in a few words, for the report's table (a method that keeps examples says how many).
    keeps = "nothing"

    def __init__(self, setting: Setting):
        self.setting = setting

    def learn(self, step: StepData) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        raise NotImplementedError

    def kept(self) -> Kept:
        return Kept()

    def details(self) -> dict:
        """What the method chose or measured on its own (a bandwidth picked on val, say): into results.json."""
        return {}
