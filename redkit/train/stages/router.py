"""Stage router: RED's router, trained after the experts are frozen (on the domain, the composition's label
loss, or both) or built from the run without training; `make_router` and `fit_router` serve the gate too."""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.modules.layers import ROUTERS
from redkit.modules.routing import RouterBase
from redkit.modules.store import install_module, module_exists, retrain_dir, save_module
from redkit.red import router_loss
from redkit.train.loop import FitResult
from redkit.train.stage_run import StageRun
from redkit.train.stages.experts import load_residual_experts
from redkit.train.stages.on_features import load_classifier, train_on_features
from redkit.train.stages.registry import STAGES, module_meta, timed


def make_router(run: StageRun, role: str) -> RouterBase:
    """The run's router kind (`config.router`, a ROUTERS name) as RED's router (role "router") or
    the MoE gate (role "gate"). "dense" is the softmax MLP; a training-free router is built from the
    run's data or experts (`from_run`) instead of trained."""
    cls, options = ROUTERS[run.config.router], run.config.router_options
    if cls.training_free:
        return cls.from_run(run, role, **options)
    return cls.build(run, role, **options)


def fit_router(
    run: StageRun,
    stage: str,
    router: RouterBase,
    loss_fn: Callable,
    train: Callable[[], tuple],
    val: tuple,
    seed_offset: int,
    retrain: bool = False,
) -> dict:
    """`train`: what the router trains on, computed only if it trains (a training-free router reads no
    training example: a replay-free one must not)."""
    directory = run.module_dir(stage)
    if not router.training_free:
        return train_on_features(
            run, stage, directory, router, loss_fn, train(), val, router.kind, None, seed_offset, retrain=retrain
        )
    if module_exists(directory) and not retrain:
        return {"skipped": str(directory)}
    # built on the CPU from statistics, modules or data: moved to where its val features are (CUDA, say)
    val_loss = float(loss_fn(router.to(run.device), *(t.to(run.device) for t in val)))
    staging = retrain_dir(directory)
    save_module(staging, router.cpu(), module_meta(run, router, router.kind, None, FitResult(0, 0, val_loss)))
    install_module(staging, directory)
    return {"module": str(directory), "epochs": 0, "best_val_loss": val_loss, "training_free": True}


ROUTER_LOSSES = ("domain", "label", "label+domain")


def composition_loss(classifier: nn.Module, with_domain: bool) -> Callable:
    """RED's label loss through the frozen composition, as a router's training objective:
    CE(C(h + Σ_i α_i Δh_i), y) with α the router's weights and Δh (N, K, d) the frozen experts'
    updates, computed once; plus the domain loss where asked, and the router's auxiliary loss."""

    def loss(
        router: RouterBase, h: torch.Tensor, y: torch.Tensor, d: torch.Tensor, updates: torch.Tensor
    ) -> torch.Tensor:
        out = router.route(h)
        label = F.cross_entropy(classifier(h + (out.weights.unsqueeze(-1) * updates).sum(dim=1)), y)
        return label + (F.cross_entropy(out.logits, d) if with_domain else 0.0) + out.aux_loss

    return loss


@STAGES.register("router")
def stage_router(run: StageRun, retrain: bool = False) -> dict:
    """RED's router: trained after the experts are frozen, on the domain label (the paper's), on the
    label loss of the frozen composition, or on both (`config.router_loss`); `retrain`: as stage experts'."""

    def work() -> dict:
        vh, vy, vd = run.split_tensors("val")
        torch.manual_seed(run.config.seed * 1000 + 300)
        router = make_router(run, "router")
        objective = getattr(run.config, "router_loss", "domain")
        if objective not in ROUTER_LOSSES:
            raise RedkitError(f"router_loss {objective!r} is not one of {', '.join(ROUTER_LOSSES)}")
        if objective == "domain":  # CE on the domain, plus the router's auxiliary loss (0 for dense)

            def domains() -> tuple:
                h, _, d = run.split_tensors("train")
                return h, d

            return fit_router(run, "router", router, router_loss, domains, (vh, vd), 300, retrain)
        classifier = load_classifier(run).requires_grad_(False)
        experts = [e.requires_grad_(False) for e in load_residual_experts(run)]

        @torch.no_grad()
        def updates(x: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K, d) every frozen expert's Δh
            return torch.stack([e(x.to(run.device)) for e in experts], dim=1).cpu()

        def train() -> tuple:
            h, y, d = run.split_tensors("train")
            return h, y, d, updates(h)

        return fit_router(
            run,
            "router",
            router,
            composition_loss(classifier, objective == "label+domain"),
            train,
            (vh, vy, vd, updates(vh)),
            300,
            retrain,
        )

    return timed(run, "router", work)
