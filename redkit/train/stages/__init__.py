"""The training stages of a run, in pipeline order, one file each. Each one skips itself if its module directory
is already complete, resumes from its checkpoint if it was interrupted, and writes its own module(s) as
config.json + model.safetensors.

    base     top-N backbone layers + shared classifier C, on `base_fraction` of train (domain-balanced)   base.py
    experts  per domain i and expert kind (residual, logit): trained ALONE on domain i, through frozen C  experts.py
    heads    per domain i a full head E_i (baselines), and the global head on all of train               experts.py
    router   2-layer MLP h -> domain, supervised on the domain label (RED; or on the label loss)         router.py
    gate     2-layer MLP h -> α, trained on the task loss of Σ α_i softmax(E_i(h)) (classical MoE)       gate.py

What they share: registry.py (STAGES, timing, module metadata), on_features.py (one small module trained on
cached features), report.py (a stage's outcome in one line). Importing this package registers the five stages
in this order.
"""

from redkit.train.stages.base import BaseData, prepare_base, stage_base, tune_top
from redkit.train.stages.experts import EXPERT_KINDS, load_heads, load_residual_experts, stage_experts, stage_heads
from redkit.train.stages.gate import stage_gate
from redkit.train.stages.on_features import domain_rows, load_classifier, train_on_features
from redkit.train.stages.registry import STAGES, fit_metrics, module_meta, timed
from redkit.train.stages.report import stage_line
from redkit.train.stages.router import ROUTER_LOSSES, composition_loss, fit_router, make_router, stage_router

PIPELINE = ("base", "experts", "heads", "router", "gate")

__all__ = [
    "EXPERT_KINDS",
    "PIPELINE",
    "ROUTER_LOSSES",
    "STAGES",
    "BaseData",
    "composition_loss",
    "domain_rows",
    "fit_metrics",
    "fit_router",
    "load_classifier",
    "load_heads",
    "load_residual_experts",
    "make_router",
    "module_meta",
    "prepare_base",
    "stage_base",
    "stage_experts",
    "stage_gate",
    "stage_heads",
    "stage_line",
    "stage_router",
    "timed",
    "train_on_features",
    "tune_top",
]
