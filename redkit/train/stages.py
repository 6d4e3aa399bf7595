"""The training stages of a run, in pipeline order. Each one skips itself if its module directory
is already complete, resumes from its checkpoint if it was interrupted, and writes its own
module(s) as config.json + model.safetensors.

    base     top-N backbone layers + shared classifier C, on `base_fraction` of train (domain-balanced)
    experts  per domain i and expert kind (residual, logit): trained ALONE on domain i, through frozen C
    heads    per domain i a full head E_i (baselines), and the global head on all of train
    router   2-layer MLP h -> domain, supervised on the domain label (RED; or on the label loss)
    gate     2-layer MLP h -> α, trained on the task loss of Σ α_i softmax(E_i(h)) (classical MoE)
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.features import PrefixStates
from redkit.modules.labels import joined_classifier, widened
from redkit.modules.layers import MODULES, ROUTERS, Classifier
from redkit.modules.routing import RouterBase
from redkit.modules.store import ModuleMeta, install_module, load_module, module_exists, retrain_dir, save_module
from redkit.red import REDConfig, REDModel, router_loss
from redkit.red.layer import new_expert
from redkit.registry import Registry
from redkit.threads import one_thread
from redkit.train.loop import Checkpoint, FitResult, fit
from redkit.train.ranks import Ranks
from redkit.train.stage_run import StageRun

# The references (redkit/references) register their own training stages here too.
STAGES: Registry[Callable] = Registry("stage")
EXPERT_KINDS = ("residual", "logit")


def timed(run: StageRun, stage: str, work: Callable[[], dict]) -> dict:
    start = time.perf_counter()
    summary = work()
    seconds = time.perf_counter() - start
    run.add_time(stage, seconds)
    run.log({"stage": stage, "event": "done", "seconds": seconds} | summary)
    return summary


def _meta(
    run: StageRun, module: nn.Module, kind: str, domain: int | None, result: FitResult, precision: str = "fp32"
) -> ModuleMeta:
    """`precision`: the arithmetic it was trained in (fp32, or bf16 autocast); its weights are fp32."""
    return ModuleMeta(
        kind=kind,
        config=vars(module.config) if hasattr(module, "config") else {},
        backbone_fingerprint=run.fingerprint,
        data_hash=run.data_hash,
        seed=run.config.seed,
        domain=domain,
        metrics={
            "best_val_loss": result.best_val_loss,
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "seconds": result.seconds,
            "precision": precision,
        },
    )


def _train_on_features(
    run: StageRun,
    stage: str,
    directory,
    module: nn.Module,
    loss_fn: Callable,
    train: tuple[torch.Tensor, ...],
    val: tuple[torch.Tensor, ...],
    kind: str,
    domain: int | None,
    seed_offset: int,
    precision: str = "fp32",
    retrain: bool = False,
) -> dict:
    """Fit `module` on cached features; `loss_fn(module, *tensors)` is a mean loss. `precision` bf16
    computes the losses under bf16 autocast (weights, optimizer and saved module stay fp32). A module
    that exists is kept, unless `retrain`: it is then trained again beside the old one, which the new
    one replaces once it is saved (an interrupted retraining leaves the old module in place)."""
    if module_exists(directory) and not retrain:
        return {"skipped": str(directory)}
    target = directory
    if module_exists(target):  # trained again beside it (checkpoints too); installed over it once saved
        directory = retrain_dir(target)
    module.to(run.device)
    train = tuple(t.to(run.device) for t in train)
    val = tuple(t.to(run.device) for t in val)
    monitor = run.monitor
    on_step = (lambda step, model: monitor(stage, step, model)) if monitor else None

    def in_precision(*tensors: torch.Tensor) -> torch.Tensor:
        if precision == "fp32":
            return loss_fn(module, *tensors)
        with torch.autocast(device_type=run.device.type, dtype=torch.bfloat16):
            return loss_fn(module, *tensors).float()

    with one_thread():  # small modules: thread hand-offs cost more than their arithmetic
        result = fit(
            module,
            lambda idx: in_precision(*(t[idx] for t in train)),
            len(train[0]),
            lambda: in_precision(*val).item(),
            run.config.train_config(stage),
            seed=run.config.seed + seed_offset,
            checkpoint_dir=directory,
            desc=f"{stage} {target.name}",
            log=run.log,
            on_step=on_step,
        )
    save_module(directory, module.cpu(), _meta(run, module, kind, domain, result, precision))
    Checkpoint(directory).remove()
    retrained = directory != target
    if retrained:
        install_module(directory, target)
    return {"module": str(target), "epochs": result.epochs, "best_val_loss": result.best_val_loss} | (
        {"retrained": True} if retrained else {}
    )


def load_classifier(run: StageRun) -> nn.Module:
    """C, joined with the label rows of domains added with new labels (redkit/modules/labels.py)."""
    return joined_classifier(
        run, lambda *parts: load_module(run.module_dir(*parts), run.fingerprint, run.feature_dim)[0].to(run.device)
    )


# ---- stage base ---------------------------------------------------------------------------------


@dataclass
class BaseData:
    """What stage base trains and validates on: the base subset's frozen-prefix states (N, T, d)
    and classes (N,), and the distinct validation texts' states (V, T', d), classes and counts (V,)."""

    train_states: PrefixStates
    train_y: torch.Tensor
    val_states: PrefixStates
    val_y: torch.Tensor
    val_w: torch.Tensor


def prepare_base(run, backbone=None, train_indices: list[int] | None = None, tag: str = "base") -> BaseData:
    """Stage base's data (or another tuning's: `train_indices` into train, default the base
    subset), with the frozen prefix run once per distinct text and cached under `tag`."""
    backbone = backbone or run.backbone
    indices = run.base_subset() if train_indices is None else train_indices
    subset = [run.splits["train"][i] for i in indices]
    val_examples = [run.splits["val"][i] for i in run.base_val_subset()]
    train_states = PrefixStates.build(run.cache_dir, backbone, [ex.question for ex in subset], f"{tag}-train")
    # Validation texts repeat a lot: score each distinct text once, weighted by its count.
    distinct: dict[str, list] = {}
    for ex in val_examples:
        distinct.setdefault(ex.question, [run.space.class_of(ex.answer), 0])[1] += 1
    val_texts = list(distinct)
    val_states = PrefixStates.build(run.cache_dir, backbone, val_texts, "base-val")
    return BaseData(
        train_states,
        run.classes(subset),
        val_states,
        torch.tensor([distinct[t][0] for t in val_texts]),
        torch.tensor([distinct[t][1] for t in val_texts], dtype=torch.float),
    )


def tune_top(
    run, backbone, top_dir, clf_dir, stage: str, train_indices: list[int] | None = None, ranks: Ranks = Ranks()
) -> dict:
    """Fine-tune `backbone`'s top-N layers and a fresh classifier over all the run's classes on
    `train_indices` of train (default: the base subset), early-stopped on val (its loss, or its
    accuracy: the stage's `select_by`); save both to `top_dir` / `clf_dir`. Stage base is this on the
    base subset; the `joint` reference on all of train. The recipe is the stage's TrainConfig."""
    if ranks.is_writer:  # rank 0 builds the cache (if the launcher has not) before the others read it
        data = prepare_base(run, backbone, train_indices, stage)
    ranks.barrier()
    if not ranks.is_writer:
        data = prepare_base(run, backbone, train_indices, stage)
    torch.manual_seed(run.config.seed)  # the classifier's init must not depend on what ran before
    classifier = Classifier(Classifier.Config(backbone.hidden_size, run.space.num_classes)).to(run.device)
    # Only these switch to training mode (dropout) and are checkpointed; the prefix stays frozen.
    trainable = nn.ModuleDict({"top": backbone.top_layers, "classifier": classifier})

    train_config = run.config.train_config(stage)

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        with backbone.autocast():
            logits = classifier(backbone(*data.train_states.batch(idx, run.device)))
        return F.cross_entropy(
            logits.float(), data.train_y[idx].to(run.device), label_smoothing=train_config.label_smoothing
        )

    # With length-grouped batches validation goes in length order too (chunks of similar lengths pad
    # less); otherwise in the texts' order, as runs made before the recipe existed scored it.
    val_order = (
        torch.argsort(data.val_states.lengths(), stable=True)
        if train_config.length_grouped
        else torch.arange(len(data.val_y))
    )

    def validate() -> dict[str, float]:
        """The count-weighted mean loss (no smoothing) and accuracy over the distinct validation
        texts; each rank scores every N-th chunk of 512 and the ranks' sums are added."""
        loss, right = 0.0, 0.0
        for first in range(512 * ranks.rank, len(data.val_y), 512 * ranks.world):
            idx = val_order[first : first + 512]
            with backbone.autocast():
                logits = classifier(backbone(*data.val_states.batch(idx, run.device))).float()
            truth, weight = data.val_y[idx].to(run.device), data.val_w[idx]
            loss += (F.cross_entropy(logits, truth, reduction="none").cpu() * weight).sum().item()
            right += ((logits.argmax(dim=-1) == truth).cpu() * weight).sum().item()
        loss, right = ranks.sum([loss, right])
        return {"loss": loss / data.val_w.sum().item(), "accuracy": right / data.val_w.sum().item()}

    result = fit(
        trainable,
        batch_loss,
        len(data.train_y),
        validate,
        train_config,
        seed=run.config.seed,
        checkpoint_dir=clf_dir,
        desc=stage,
        log=run.log,
        head=classifier,
        ranks=ranks,
        lengths=data.train_states.lengths(),
    )
    backbone.eval()
    meta = _meta(run, classifier, "classifier", None, result, backbone.config.precision)
    meta.backbone_fingerprint = backbone.fingerprint()
    meta.metrics["nproc"] = ranks.world  # how it was trained: N processes draw other dropout masks
    if not ranks.is_writer:
        return {}
    save_module(
        top_dir,
        backbone.top_state_dict(),
        ModuleMeta(
            kind="backbone_top",
            backbone_fingerprint=meta.backbone_fingerprint,
            seed=run.config.seed,
            data_hash=meta.data_hash,
            metrics=meta.metrics,
            config=backbone.top_config(),
        ),
    )
    save_module(clf_dir, classifier.cpu(), meta)
    Checkpoint(clf_dir).remove()
    return {
        "epochs": result.epochs,
        "best_epoch": result.best_epoch,
        "best_val_loss": result.best_val_loss,
        **({"best_val_accuracy": result.best_val_accuracy} if result.best_val_accuracy is not None else {}),
        "examples": len(data.train_y),
    }


@STAGES.register("base")
def stage_base(run, ranks: Ranks = Ranks()) -> dict:
    """Fine-tune the top-N layers and the shared classifier on the label-balanced base subset;
    with `ranks` one of N data-parallel processes (redkit/train/distributed.py)."""
    top_dir, clf_dir = run.module_dir("backbone_top"), run.module_dir("classifier")
    if module_exists(top_dir) and module_exists(clf_dir):
        return {"skipped": "base"}

    def work() -> dict:
        summary = tune_top(run, run.backbone, top_dir, clf_dir, "base", ranks=ranks)
        run.__dict__.pop("fingerprint", None)  # the tuned top changed the features
        return summary

    return timed(run, "base", work) if ranks.is_writer else work()


# ---- stages on cached features --------------------------------------------------------------------


def _domain_rows(labels: torch.Tensor, domain: int) -> torch.Tensor:
    return (labels == domain).nonzero(as_tuple=True)[0]


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
                tr, va = _domain_rows(d, domain), _domain_rows(vd, domain)
                red.train_part(domain)  # C and the other experts frozen
                done[f"{kind}/{space.domains[domain]}"] = _train_on_features(
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
            tr, va = _domain_rows(d, domain), _domain_rows(vd, domain)
            torch.manual_seed(run.config.seed * 1000 + 100 + domain)
            done[space.domains[domain]] = _train_on_features(
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
            done["global_full"] = _train_on_features(
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


def make_router(run: StageRun, role: str) -> RouterBase:
    """The run's router kind (`config.router`, a ROUTERS name) as RED's router (role "router") or
    the MoE gate (role "gate"). "dense" is the softmax MLP; a training-free router is built from the
    run's data or experts (`from_run`) instead of trained."""
    cls, options = ROUTERS[run.config.router], run.config.router_options
    if cls.training_free:
        return cls.from_run(run, role, **options)
    return cls.build(run, role, **options)


def _fit_router(
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
        return _train_on_features(
            run, stage, directory, router, loss_fn, train(), val, router.kind, None, seed_offset, retrain=retrain
        )
    if module_exists(directory) and not retrain:
        return {"skipped": str(directory)}
    # built on the CPU from statistics, modules or data: moved to where its val features are (CUDA, say)
    val_loss = float(loss_fn(router.to(run.device), *(t.to(run.device) for t in val)))
    staging = retrain_dir(directory)
    save_module(staging, router.cpu(), _meta(run, router, router.kind, None, FitResult(0, 0, val_loss)))
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

            return _fit_router(run, "router", router, router_loss, domains, (vh, vd), 300, retrain)
        classifier = load_classifier(run).requires_grad_(False)
        experts = [e.requires_grad_(False) for e in load_residual_experts(run)]

        @torch.no_grad()
        def updates(x: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, K, d) every frozen expert's Δh
            return torch.stack([e(x.to(run.device)) for e in experts], dim=1).cpu()

        def train() -> tuple:
            h, y, d = run.split_tensors("train")
            return h, y, d, updates(h)

        return _fit_router(
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


@STAGES.register("gate")
def stage_gate(run: StageRun, retrain: bool = False) -> dict:
    """Classical MoE: a gate trained on the task loss of Σ α_i softmax(E_i(h)), experts frozen (`retrain`:
    as stage experts')."""

    def work() -> dict:
        vh, vy, vd = run.split_tensors("val")
        torch.manual_seed(run.config.seed * 1000 + 400)
        gate = make_router(run, "gate")
        if gate.training_free:  # built, not trained, and the same whatever it weighs: scored on the domain, as a router
            return _fit_router(run, "gate", gate, router_loss, lambda: (), (vh, vd), 400, retrain)
        heads = [head.requires_grad_(False) for head in load_heads(run)]

        @torch.no_grad()
        def target_log_probs(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            """(N, d), (N,) -> (N, K) log softmax(E_i(x))_t: the heads are frozen, so each example's
            term is computed once, not every epoch; only the target's column enters the loss."""
            x, t = x.to(run.device), t.to(run.device)
            chunks = [
                torch.stack(
                    [
                        F.log_softmax(head(x[i : i + 4096]), dim=-1).gather(1, t[i : i + 4096, None]).squeeze(1)
                        for head in heads
                    ],
                    dim=1,
                )
                for i in range(0, len(x), 4096)
            ]
            return torch.cat(chunks) if chunks else x.new_zeros(0, len(heads))

        def mixture_nll(g: RouterBase, x: torch.Tensor, log_p_t: torch.Tensor) -> torch.Tensor:
            """-log Σ_i w_i softmax(E_i(x))_t, plus the gate's auxiliary loss (0 for dense). A head
            that cannot output t (a later domain's label, a masked one) has log p = -inf there: the
            log-sum-exp over the K heads stays finite, as its gradient, while one head can."""
            out = g.route(x)
            log_w = g.log_weights(out)  # (B, K): dense log_softmax; a sparse router's unselected ~ -28
            return -torch.logsumexp(log_w + log_p_t, dim=1).mean() + out.aux_loss

        def train() -> tuple:
            h, y, _ = run.split_tensors("train")
            return h, target_log_probs(h, y)

        return _fit_router(run, "gate", gate, mixture_nll, train, (vh, target_log_probs(vh, vy)), 400, retrain)

    return timed(run, "gate", work)


PIPELINE = ("base", "experts", "heads", "router", "gate")


def stage_line(stage: str, outcome) -> str:
    """What a stage returned, in one line of at most about 200 characters: for a stage of several
    modules (experts, heads) each module's outcome, `name: outcome; ...`."""
    if isinstance(outcome, dict) and outcome and all(isinstance(v, dict) for v in outcome.values()):
        text = "; ".join(f"{name}: {_outcome_text(one)}" for name, one in outcome.items())
    else:
        text = _outcome_text(outcome)
    return f"[{stage}] {text if len(text) < 200 else text[:200] + ' ...'}"


def _outcome_text(outcome) -> str:
    """One module's outcome: `kept` (it was already trained), `skipped (why)`, or what its training
    reported (`1 epoch, best val loss 4.583`; `retrained, ...` where `--retrain` replaced it)."""
    if not isinstance(outcome, dict):
        return str(outcome)
    if "skipped" in outcome:  # a module directory or the stage's own name: it exists; else a reason
        why = str(outcome["skipped"])
        return "kept (already trained)" if " " not in why else f"skipped ({why})"
    parts = ["retrained"] if outcome.get("retrained") else []
    for key, value in outcome.items():
        if key in ("module", "retrained"):
            continue
        if key == "epochs":
            parts.append(f"{value} epoch{'s' if value != 1 else ''}")
        else:
            parts.append(f"{key.replace('_', ' ')} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
    return ", ".join(parts)
