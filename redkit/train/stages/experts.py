"""Stages experts and heads: per domain, modules trained alone on that domain's cached features (RED's experts
through the frozen C; the baselines' full heads), and how the later stages load them back."""

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.modules.labels import widened
from redkit.modules.layers import MODULES
from redkit.modules.store import load_module, module_exists
from redkit.red import REDConfig, REDModel
from redkit.red.layer import new_expert
from redkit.train.stage_run import StageRun
from redkit.train.stages.on_features import domain_rows, load_classifier, train_on_features
from redkit.train.stages.registry import STAGES, timed

EXPERT_KINDS = ("residual", "logit")


@STAGES.register("experts")
def stage_experts(
    run: StageRun,
    domains: list[int] | None = None,
    kinds: tuple[str, ...] = EXPERT_KINDS,
    precision: str = "fp32",
    retrain: bool = False,
) -> dict:
    """Each expert sees only its own domain's examples and nothing of the other experts: the RED
    model's part i, trained alone through its frozen classifier (`part_loss(i, ...)`); `precision`
    bf16 trains them under bf16 autocast (recorded in each module's metrics). An expert that exists
    is kept, unless `retrain` (then it is trained again and replaces the old one; nothing else moves)."""

    def work() -> dict:
        classifier = load_classifier(run)
        h, y, d = run.split_tensors("train")
        vh, vy, vd = run.split_tensors("val")
        space = run.space
        done = {}
        for kind in kinds:
            config = REDConfig(
                dim=run.feature_dim,
                num_classes=space.num_classes,
                domains=space.domains,
                expert_rank=run.config.expert_rank,
                expert_kind=kind,
            )
            experts = []
            for domain in range(space.num_domains):  # each expert's init is seeded by its domain alone
                torch.manual_seed(run.config.seed * 1000 + domain)
                experts.append(new_expert(config))
            red = REDModel(config, (classifier, experts, None))
            for domain in domains if domains is not None else range(space.num_domains):
                tr, va = domain_rows(d, domain), domain_rows(vd, domain)
                red.train_part(domain)  # C and the other experts frozen
                done[f"{kind}/{space.domains[domain]}"] = train_on_features(
                    run,
                    "experts",
                    run.module_dir("experts", kind, space.domains[domain]),
                    red.experts[domain],
                    lambda expert, x, t, i=domain: red.part_loss(i, x, t),
                    (h[tr], y[tr]),
                    (vh[va], vy[va]),
                    kind,
                    domain,
                    seed_offset=domain,
                    precision=precision,
                    retrain=retrain,
                )
        return done

    return timed(run, "experts", work)


@STAGES.register("heads")
def stage_heads(run: StageRun, domains: list[int] | None = None, retrain: bool = False) -> dict:
    """Full per-domain heads for the baselines, and the global head on all of train (`retrain`: as
    stage experts')."""

    def work() -> dict:
        h, y, d = run.split_tensors("train")
        vh, vy, vd = run.split_tensors("val")
        space = run.space
        config = MODULES["head"].Config(dim=run.feature_dim, num_classes=space.num_classes)
        ce = lambda head, x, t: F.cross_entropy(head(x), t)  # noqa: E731
        done = {}
        for domain in domains if domains is not None else range(space.num_domains):
            tr, va = domain_rows(d, domain), domain_rows(vd, domain)
            torch.manual_seed(run.config.seed * 1000 + 100 + domain)
            done[space.domains[domain]] = train_on_features(
                run,
                "heads",
                run.module_dir("heads", space.domains[domain]),
                MODULES["head"](config),
                ce,
                (h[tr], y[tr]),
                (vh[va], vy[va]),
                "head",
                domain,
                seed_offset=100 + domain,
                retrain=retrain,
            )
        if domains is None:
            torch.manual_seed(run.config.seed * 1000 + 200)
            done["global_full"] = train_on_features(
                run,
                "heads",
                run.module_dir("heads", "global_full"),
                MODULES["head"](config),
                ce,
                (h, y),
                (vh, vy),
                "head",
                None,
                200,
                retrain=retrain,
            )
        return done

    return timed(run, "heads", work)


def load_residual_experts(run: StageRun) -> list[nn.Module]:
    """Every domain's residual expert, in domain order (what RED's router weighs)."""
    experts = []
    for name in run.space.domains:
        path = run.module_dir("experts", "residual", name)
        if not module_exists(path):
            raise RedkitError(f"{path}: missing; run stage experts first")
        experts.append(load_module(path, run.fingerprint, run.feature_dim)[0].to(run.device))
    return experts


def load_heads(run: StageRun) -> list[nn.Module]:
    heads = []
    for name in run.space.domains:
        path = run.module_dir("heads", name)
        if not module_exists(path):
            raise RedkitError(f"{path}: missing; run stage heads first")
        heads.append(widened(run, load_module(path, run.fingerprint, run.feature_dim)[0].to(run.device), float("-inf")))
    return heads
