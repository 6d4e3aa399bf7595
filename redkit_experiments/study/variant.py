"""A trained run seen through one ablation variant.

The variant shares the parent run's data, tuned backbone, cached features and stage-base modules
(classifier, backbone top); it may change the expert rank or divide the answers among K experts
of equal width, and it keeps every module it retrains in its own directory. It is a `StageRun`
(redkit/train/stage_run.py): the training stages on features and ModuleSet take it exactly as they
take a Run, so a variant is trained "exactly as the main stages train", and the parent's modules
are never written.
"""

import copy
from functools import cached_property
from pathlib import Path

import torch

from redkit.atomic import write_json
from redkit.run import Run
from redkit.space import LabelSpace
from redkit.train.stage_run import StageRun

BASE_MODULES = ("classifier", "backbone_top")  # stage base's: always the parent's
# The global head is trained on all of train over every class: how the answers are divided among experts
# (K) or the experts' rank do not change it, so a variant that retrains the domains' heads still reads the
# parent's (the label routers and the global_head composition need it in every variant).
GLOBAL_HEAD = ("heads", "global_full")


class VariantRun(StageRun):
    bundle = None  # a variant writes into its own directory, never into a bundle
    monitor = None  # (routing analysis sets one on its variants)

    def __init__(
        self, parent, directory: Path, trains: tuple[str, ...], rank: int | None = None, experts: int | None = None
    ):
        """`trains`: the module kinds this variant retrains (e.g. ("experts",), or ("experts",
        "heads", "router", "gate")); any other module is read from the parent run."""
        self.parent, self.dir, self.trains = parent, Path(directory), trains
        self.config = copy.deepcopy(parent.config)
        if rank is not None:
            self.config.expert_rank = rank
        self.experts = experts
        self.timings: dict[str, float] = {}
        write_json(
            self.dir / "variant.json",
            {"parent": str(parent.dir), "trains": list(trains), "rank": rank, "experts": experts},
        )

    # The parent's features, hence their backbone, data and device.
    device = property(lambda self: self.parent.device)
    feature_dim = property(lambda self: self.parent.feature_dim)
    fingerprint = property(lambda self: self.parent.fingerprint)
    data_hash = property(lambda self: self.parent.data_hash)

    @cached_property
    def space(self) -> LabelSpace:
        return self.parent.space.in_equal_parts(self.experts) if self.experts else self.parent.space

    def module_dir(self, *parts: str) -> Path:
        if parts[0] in BASE_MODULES or parts[0] not in self.trains or parts == GLOBAL_HEAD:
            return self.parent.module_dir(*parts)
        return self.dir / "modules" / Path(*parts)

    def split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, classes, domains = self.parent.split_tensors(name)
        return h, classes, (self.space.domain_of_class(classes) if self.experts else domains)

    # Run's own bookkeeping, on the variant's directory: its log.jsonl and timings.json, never the run's.
    log = Run.log
    add_time = Run.add_time
