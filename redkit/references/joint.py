"""`joint`: top-N backbone layers + a classifier fine-tuned on all of train, early-stopped on val.

It is stage base's recipe (redkit.train.stages.tune_top) on 100 % of train instead of the base
subset, from the untuned backbone, into modules/joint/{backbone_top,classifier}. With
`base_fraction` 1.0 the two are the same training, so the base's own modules *are* the joint model:
nothing is trained twice and the reference reads the base's (its time is the base's), except in a
run derived by the life cycle (a domain added or removed): its stage base was trained on the
parent's data, so joint there is a training of its own (`redkit study lifecycle` retrains it).
"""

from functools import lru_cache

import torch
from torch.nn import functional as F

from redkit.backbone import Backbone
from redkit.features import cached_features
from redkit.modules.store import load_module, load_state, module_exists
from redkit.references.registry import REFERENCES, Reference
from redkit.train.stages import STAGES, timed, tune_top


def base_is_joint(run) -> bool:
    """Stage base saw all of this run's train: base_fraction 1.0 and no domain added or removed since."""
    derived = getattr(run.config, "added_domains", ()) or getattr(run.config, "removed_domains", ())
    return run.config.base_fraction >= 1.0 and not derived


def _dirs(run):
    if base_is_joint(run):
        return run.module_dir("backbone_top"), run.module_dir("classifier")
    return run.module_dir("joint", "backbone_top"), run.module_dir("joint", "classifier")


@STAGES.register("joint")
def stage_joint(run) -> dict:
    top_dir, clf_dir = _dirs(run)
    if base_is_joint(run):
        return {"skipped": "base_fraction 1.0: stage base is the joint model"}
    if module_exists(top_dir) and module_exists(clf_dir):
        return {"skipped": "joint"}
    backbone = Backbone(run.config.backbone).to(run.device)  # untuned: joint starts where the base did
    return timed(
        run,
        "joint",
        lambda: tune_top(run, backbone, top_dir, clf_dir, "joint", train_indices=list(range(len(run.splits["train"])))),
    )


@lru_cache(maxsize=4)
def _joint_model(run) -> tuple[Backbone, torch.nn.Module]:
    """The joint backbone (its tuned top loaded) and classifier, checked against each other."""
    top_dir, clf_dir = _dirs(run)
    if base_is_joint(run):
        return run.backbone, load_module(clf_dir, run.fingerprint, run.feature_dim)[0].to(run.device)
    backbone = Backbone(run.config.backbone)
    state, _ = load_state(top_dir)
    backbone.load_top_state_dict(state)
    backbone = backbone.to(run.device).eval()
    classifier = load_module(clf_dir, backbone.fingerprint(), backbone.hidden_size)[0].to(run.device)
    return backbone, classifier


@torch.no_grad()
def joint_probs(run, name: str, texts: list[str]) -> torch.Tensor:
    """(N, C) softmax of the joint classifier over the joint backbone's pooled features."""
    backbone, classifier = _joint_model(run)
    # With the base as the joint model its features are the run's own (one cache file, not two).
    h = (
        run.text_features(name, texts)
        if base_is_joint(run)
        else cached_features(run.cache_dir, backbone, texts, f"joint-{name}")
    )
    h = h.to(run.device)
    return F.softmax(classifier(h), dim=-1).cpu()


REFERENCES.register("joint")(Reference(joint_probs, ("joint",)))
