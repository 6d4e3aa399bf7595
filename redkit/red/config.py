"""REDConfig: what a RED model is made of, written to config.json by `save_pretrained`.

Axes: d hidden size (`dim`), C classes, K experts (one per domain), r expert rank.
"""

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from redkit.backbone.model import POOLINGS
from redkit.errors import RedkitError

EXPERT_KINDS = ("residual", "logit")  # residual: RED's Δh = B σ(A h); logit: the original code's Δz = W h (ablation)


@dataclass
class REDConfig:
    dim: int  # d: width of the pooled features h the model acts on
    num_classes: int  # C: outputs of the shared classifier
    domains: tuple[str, ...]  # one expert per domain, in this order: K = len(domains)
    expert_rank: int = 0  # r of a residual expert; 0 = d // 4
    expert_kind: str = "residual"
    router: str = "dense"  # a ROUTERS name (`--router NAME`)
    router_hidden: int = 256  # hidden width of an MLP router (where the router's config has `hidden`)
    router_options: dict = field(default_factory=dict)  # the router config's other fields (k, capacity, scale...)
    pooling: str = "mean"  # for `get_red_model` around a Hugging Face model
    labels: tuple = ()  # optional class names, index = class id (model card, predictions)

    def __post_init__(self):
        self.domains = tuple(self.domains)
        self.labels = tuple(self.labels)
        if not self.domains or len(set(self.domains)) != len(self.domains):
            raise RedkitError(f"REDConfig: field 'domains' must name each expert once, got {list(self.domains)}")
        if self.expert_kind not in EXPERT_KINDS:
            raise RedkitError(
                f"REDConfig: field 'expert_kind' is {self.expert_kind!r}; expected one of {', '.join(EXPERT_KINDS)}"
            )
        if self.pooling not in POOLINGS:
            raise RedkitError(f"REDConfig: field 'pooling' is {self.pooling!r}; expected one of {', '.join(POOLINGS)}")
        if self.labels and len(self.labels) != self.num_classes:
            raise RedkitError(f"REDConfig: {len(self.labels)} labels for {self.num_classes} classes")
        for name in ("dim", "num_classes", "router_hidden"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise RedkitError(f"REDConfig: field '{name}' must be a positive integer, got {getattr(self, name)!r}")

    @property
    def num_experts(self) -> int:  # K
        return len(self.domains)

    @property
    def rank(self) -> int:  # r
        return self.expert_rank or self.dim // 4

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: object, file: Path | str = "REDConfig") -> "REDConfig":
        """A saved config -> REDConfig; an unknown or missing field is one line naming the file."""
        if not isinstance(raw, dict):
            raise RedkitError(f"{file}: a RED config must be a JSON object, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise RedkitError(f"{file}: unknown RED config field {unknown[0]!r}")
        try:
            return cls(**raw)
        except TypeError as err:
            raise RedkitError(f"{file}: not a RED config ({str(err).splitlines()[0]})") from None
