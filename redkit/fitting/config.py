"""A fit run's settings: where its data came from, how to read it, and the classes and domains
found in it (recorded, in the run's order, so that the run reads the same way whenever opened)."""

import copy
from dataclasses import dataclass, field

from redkit.backbone import BackboneConfig
from redkit.fitting.recipe import TUNING
from redkit.run import DEFAULT_STAGE_OVERRIDES, TextConfig

# A fit run's stages: the stages on cached features as every run trains them; stage base (and joint,
# where it is trained apart) by the fine-tuning recipe of redkit/fitting/recipe.py.
# A tuned owner of the replay-free recipe (stage "owners", --owner-experts tuned) trains its top layers by it too.
FIT_STAGE_OVERRIDES = copy.deepcopy(DEFAULT_STAGE_OVERRIDES) | {
    "base": dict(TUNING),
    "joint": dict(TUNING),
    "owners": dict(TUNING),
}


@dataclass
class FitConfig(TextConfig):
    task: str = "fit"
    data_dir: str = ""  # train.jsonl|csv, optional val and test, as given (resolved path)
    data_format: str = (
        "files"  # "files": DIR/train.jsonl|csv ...; "clinc150": the authors' data_full.json + domains.json
    )
    oos_file: str | None = None  # out-of-scope validation texts (`--oos`): the OOS threshold is chosen on them
    text_field: str = "text"
    label_field: str = "label"
    domain_field: str = "domain"
    skip_invalid: bool = False  # records with an empty text, label or domain are left out (and counted), not refused
    val_fraction: float = 0.1  # of each domain's training examples, carved for validation when there is no val file
    labels: tuple[str, ...] = ()  # class c stands for labels[c]; found in the training file
    numeric_labels: bool = False  # every label is an integer: sorted numerically, predicted as ints
    domains: tuple[str, ...] = ()  # one expert each; found in the training file (add-domain appends)
    label_domains: tuple[str, ...] = ()  # the one domain of each label, where every label has one in train; else empty
    added_data: tuple[str, ...] = ()  # data directories of the domains add-domain plugged in later, in order
    added_domains: tuple[
        str, ...
    ] = ()  # domains add-domain plugged in that the run never had (stage base never saw them)
    removed_domains: tuple[
        str, ...
    ] = ()  # the domains remove-domain took out, in order (a domain added back stays listed)
    label_rows: dict[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # domain -> the new labels its label_rows module outputs
    removed_labels: tuple[str, ...] = ()  # labels only removed domains had: masked, no composition predicts them
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    stage_overrides: dict[str, dict] = field(default_factory=lambda: copy.deepcopy(FIT_STAGE_OVERRIDES))
    # Of train, stratified by domain, for stage base. 1.0 (stage base is then the joint model, and the
    # experts refine it), chosen on CLINC150's val by `redkit study levers` (docs/results/clinc150.md); the
    # paper's recipe is 0.1, which `--base-fraction 0.1` restores.
    base_fraction: float = 1.0
    references: tuple[str, ...] = ("joint", "linear_probe")  # a fit run is always measured against both
    # "pooled" (stage base tunes the top layers and C on every domain's data) or "replay-free" (each domain's
    # modules from its own data alone, nothing trained on pooled data: redkit/fitting/replay_free.py)
    recipe: str = "pooled"
    # the replay-free recipe's owners: "residual" experts on the frozen features, or "tuned" top layers of their own
    # (redkit/fitting/tuned_owners.py)
    owner_experts: str = "residual"
    base_val_examples: int | None = None  # stage base's per-epoch validation: all of val, or this many
