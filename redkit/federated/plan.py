"""What the server sends every owner before a round: enough to train a contribution that fits the others'.

Nothing in it is data: the backbone is named by its fingerprint (each owner loads its own copy: the embedded
backbone, or a local path), the seed, and the router's settings (φ's width and seed: every owner's statistics
must be of the same random features to be summed). From it, owner and server each build the same *host*: the
run an owner's modules are trained through, made of the pretrained backbone and nothing trained on anyone's
data, so that no owner depends on another:

    backbone_top   the pretrained top layer, untouched (nobody holds the data to tune it)
    classifier     C over no label (B, 0): every owner's labels are its own label rows (redkit/lifecycle/new_labels.py)

An owner's domain is then what the replay-free recipe of `redkit fit` makes of each domain
(redkit/fitting/replay_free.py: train_domain): its residual expert, its label rows, its routing statistics and its
density, trained alone on its own data. With `owner_experts` "tuned" (`redkit federate --owner-experts tuned`), its
own copy of the backbone's top TUNED_LAYERS layers instead of the residual expert, and the router's settings of
`redkit fit --recipe replay-free --owner-experts tuned` (r = [h, lower], M = 4,096, routed by the ridge): the plan
splits the backbone there, so its fingerprint is another, and its host's top is those layers, pretrained.
With `secure_aggregation` (`--secure-aggregation`) every owner's statistics carry counts and means only, and their
scatters reach the server as one sum (secure_sum.py).
"""

import json
from dataclasses import asdict, dataclass, field

from redkit.backbone import Backbone, BackboneConfig
from redkit.errors import RedkitError
from redkit.fitting import replay_free
from redkit.incremental.projection import WIDTH


@dataclass
class FederationPlan:
    backbone: BackboneConfig = field(
        default_factory=lambda: BackboneConfig(trainable_layers=1, max_length=replay_free.MAX_LENGTH)
    )
    fingerprint: str = ""  # of the pretrained backbone (set by `of`): an owner with another refuses to train
    seed: int = 0
    val_fraction: float = 0.1  # of an owner's training examples, carved for its early stopping where it has no val
    router_options: dict = field(default_factory=lambda: {"width": WIDTH, "seed": 0})
    owner_experts: str = replay_free.RESIDUAL  # or TUNED: each owner tunes its own top layers (module docstring)
    max_epochs: int | None = None  # caps every owner's epochs (quick runs; None: the recipe's)
    secure_aggregation: bool = False  # the owners' scatters summed by SecAgg+, never sent alone (secure_sum.py)

    @classmethod
    def of(cls, **settings) -> "FederationPlan":
        """The plan of `settings`, its backbone's fingerprint computed. owner_experts "tuned" splits the backbone at
        its top TUNED_LAYERS layers and routes as `fit --owner-experts tuned` does; `router_options` given are
        read over the owners' kind's (each a field of the Gaussian router's config, or one line)."""
        from redkit.api import check_router_options

        experts = settings.get("owner_experts", replay_free.RESIDUAL)
        if experts not in replay_free.OWNER_EXPERTS:
            raise RedkitError(f"owner_experts {experts!r}: expected one of {', '.join(replay_free.OWNER_EXPERTS)}")
        defaults = {"width": WIDTH, "seed": 0}
        if experts == replay_free.TUNED:
            layers = replay_free.TUNED_LAYERS
            settings.setdefault("backbone", BackboneConfig(trainable_layers=layers, max_length=replay_free.MAX_LENGTH))
            defaults |= replay_free.TUNED_ROUTER_OPTIONS
        check_router_options("gaussian", settings.get("router_options", {}))
        settings["router_options"] = defaults | settings.get("router_options", {})
        plan = cls(**settings)
        plan.fingerprint = Backbone(plan.backbone).fingerprint()
        return plan

    def parts(self) -> tuple[tuple[str, ...], ...]:
        """What each domain's owner sends: one module of each part (paths under modules/, before the domain)."""
        return replay_free.domain_parts(self)

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
            "recipe": replay_free.REPLAY_FREE,
            "owner_experts": self.owner_experts,
        }


def write_host(run, plan: FederationPlan) -> None:
    """`run`'s host (redkit/fitting/replay_free.py: the pretrained top, untouched, and C over no label); refuses a
    backbone whose fingerprint is not the plan's."""
    backbone = run.backbone
    if backbone.fingerprint() != plan.fingerprint:
        raise RedkitError(
            f"backbone {backbone.path} has fingerprint {backbone.fingerprint()}, the federation's is "
            f"{plan.fingerprint}: every owner must load the same backbone"
        )
    replay_free.write_host(run, plan.fingerprint, plan.seed)
