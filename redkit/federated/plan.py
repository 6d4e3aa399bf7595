"""What the server sends every owner before a round: enough to train a contribution that fits the others'.

Nothing in it is data: the backbone is named by its fingerprint (each owner loads its own copy: the embedded
backbone, or a local path), the seed, and the router's settings (φ's width and seed: every owner's statistics
must be of the same random features to be summed). From it, owner and server each build the same *host*: the
run an owner's modules are trained through, made of the pretrained backbone and nothing trained on anyone's
data, so that no owner depends on another:

    backbone_top   the pretrained top layer, untouched (nobody holds the data to tune it)
    classifier     C over no label (B, 0): every owner's labels are its own label rows (redkit/lifecycle/new_labels.py)

An owner's domain is then what `redkit add-domain` makes of a domain with new labels: its residual expert with
its label rows, logit expert, head and routing statistics, each trained alone on its own data.
"""

import json
from dataclasses import asdict, dataclass, field

import torch

from redkit.backbone import Backbone, BackboneConfig
from redkit.errors import RedkitError
from redkit.incremental.projection import WIDTH
from redkit.modules.layers import Classifier
from redkit.modules.store import ModuleMeta, save_module

HOST_PARTS = (("backbone_top",), ("classifier",))


@dataclass
class FederationPlan:
    backbone: BackboneConfig = field(default_factory=lambda: BackboneConfig(trainable_layers=1, max_length=128))
    fingerprint: str = ""  # of the pretrained backbone (set by `of`): an owner with another refuses to train
    seed: int = 0
    val_fraction: float = 0.1  # of an owner's training examples, carved for its early stopping where it has no val
    router_options: dict = field(default_factory=lambda: {"width": WIDTH, "seed": 0})

    @classmethod
    def of(cls, **settings) -> "FederationPlan":
        plan = cls(**settings)
        plan.fingerprint = Backbone(plan.backbone).fingerprint()
        return plan

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "FederationPlan":
        raw = json.loads(text)
        return cls(**(raw | {"backbone": BackboneConfig(**raw["backbone"])}))

    def config_fields(self) -> dict:
        """The FitConfig fields every run of this federation shares (owners' and the assembled one)."""
        return {
            "backbone": self.backbone,
            "seed": self.seed,
            "val_fraction": self.val_fraction,
            "router": "gaussian",
            "router_options": dict(self.router_options),
            "references": (),  # nobody holds the pooled data a reference trains on
            "base_fraction": 0.0,
        }


def write_host(run, plan: FederationPlan) -> None:
    """`run`'s backbone_top (the pretrained top, untouched) and classifier C over no label; refuses a backbone
    whose fingerprint is not the plan's."""
    backbone = Backbone(plan.backbone)
    if backbone.fingerprint() != plan.fingerprint:
        raise RedkitError(
            f"backbone {backbone.path} has fingerprint {backbone.fingerprint()}, the federation's is "
            f"{plan.fingerprint}: every owner must load the same backbone"
        )
    top = {
        "source_fingerprint": backbone.source_fingerprint,
        "source_path": str(backbone.path),
        "split_at": backbone.split_at,
        "pooling": backbone.config.pooling,
        "dim": backbone.hidden_size,
    }
    metrics = {"trained": False}
    save_module(
        run.module_dir("backbone_top"),
        backbone.top_state_dict(),
        ModuleMeta("backbone_top", top, plan.fingerprint, seed=plan.seed, metrics=metrics),
    )
    torch.manual_seed(plan.seed)
    classifier = Classifier(Classifier.Config(backbone.hidden_size, 0))  # (B, d) -> (B, 0)
    meta = ModuleMeta("classifier", vars(classifier.config), plan.fingerprint, seed=plan.seed, metrics=metrics)
    save_module(run.module_dir("classifier"), classifier, meta)
