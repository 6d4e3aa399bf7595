"""What every method of the study is: it learns one step at a time from that step's data only, answers
for every class seen so far, and declares what it keeps from earlier steps.

    learn(t)        train on step t: the stream's train/val rows of step t's classes (and whatever the
                    method kept from steps < t)
    scores(split, rows)   (N, C) scores over every class; the study masks the classes not yet seen
    kept()          what it holds from earlier steps beside the model that predicts, counted

Methods register by name in METHODS (`--method NAME`, repeatable), as the library's registries do.
"""

from dataclasses import asdict, dataclass

import torch

from redkit.registry import Registry

METHODS: Registry[type] = Registry("method")


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

    def as_dict(self) -> dict:
        return asdict(self) | {"bytes": self.bytes}


def tensor_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def module_bytes(module: torch.nn.Module) -> int:
    return tensor_bytes(*module.state_dict().values())


class Method:
    """The base class: subclasses give `learn`, `scores` and, where they keep anything, `kept`.
    `context` (redkit_experiments/incremental/study.py: StudyContext) holds the stream, the frozen
    features, the prefix states, the settings and the seed."""

    name = ""
    # What it keeps, in a few words, for the report's table (a method that keeps examples says how many).
    keeps = "nothing"

    def __init__(self, context):
        self.context = context

    def learn(self, t: int) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def scores(self, split: str, rows: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def kept(self) -> Kept:
        return Kept()
