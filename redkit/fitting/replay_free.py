"""The replay-free recipe of a fit run (`redkit fit --recipe replay-free`): every stage reads one domain's data at
a time, so the run is what its domains' owners would build without ever pooling their data.

    host      the pretrained backbone's top, untouched, and C over no label (B, 0)            nothing trained
    owners    each domain alone, on the features of its own texts encoded alone:            train_domain
                  experts/residual/<d>   Δh_d = B σ(A h)
                  label_rows/<d>         R_d over d's labels: p(y|h, d) = softmax R_d(h + Δh_d(h))
                  statistics/<d>         counts, class means and scatter of φ(h) (its share of the router)
                  density/<d>            its class Gaussians of h + Δh_d(h), calibrated on its own val (the
                                         out-of-scope score: redkit/oos/owner_density.py)
              trained by train_owner_share (redkit/incremental/owner.py), seeded by the domain's name
    router    the Gaussian router built from the statistics modules (redkit/routers/gaussian.py); the gate is
              the same router (the domain posterior does not depend on what it weighs)

With `--owner-experts tuned` each owner tunes its own copy of the backbone's top layers and rows over its own labels
instead of a residual expert, and the router reads the frozen layers' states too and routes by the ridge: the
study's `red_tuned` (tuned_owners.py, tuned_encoder.py); the same `train_domain` trains them on every path.

A pooled run (the default recipe) tunes the backbone's top layers and C on every domain's training data first
(stage base), and its references train on all of it; here nothing does, so a label belongs to one domain's rows
and a run holds no reference. `max_length` is fixed (MAX_LENGTH, or --max-length) rather than settled from every
domain's training texts.

One implementation: `train_domain` is what `redkit federate`'s owners (redkit/federated/owner.py), add-domain and
train-expert on a replay-free run (redkit/lifecycle/grow.py) call, and the study's `red`
(redkit_experiments/incremental) calls train_owner_share with the same seed; a domain's modules are therefore
the same bytes whichever path built them (tests/test_replay_free_recipe.py).
"""

from dataclasses import replace

import torch

from redkit.errors import RedkitError
from redkit.fitting.owner_data import domain_examples, pending_owner
from redkit.fitting.tuned_owners import TUNED_PARTS, train_tuned_domain
from redkit.incremental.owner import owner_seed, train_owner_share
from redkit.incremental.tuned import ROUTER_WIDTH
from redkit.modules.layers import Classifier
from redkit.modules.store import ModuleMeta, module_exists, save_module
from redkit.names import check_name
from redkit.oos.owner_density import DENSITY, OwnerDensity
from redkit.routers.gaussian import POOLED_LOWER, STATISTICS, DomainStatistics, routing_projection, statistics_rank
from redkit.threads import one_thread
from redkit.train.loop import Checkpoint
from redkit.train.stages import PIPELINE, STAGES, timed

POOLED, REPLAY_FREE = "pooled", "replay-free"
RECIPES = (POOLED, REPLAY_FREE)
RESIDUAL, TUNED = "residual", "tuned"  # what each owner's expert is (--owner-experts)
OWNER_EXPERTS = (RESIDUAL, TUNED)
TUNED_LAYERS = 2  # the top layers a tuned owner tunes unless --trainable-layers says otherwise (the study's)
# the tuned owners' router (the study's red_tuned's): φ of r = [h, lower] at M 4,096, each query to the ridge's owner
TUNED_ROUTER_OPTIONS = {"input": POOLED_LOWER, "width": ROUTER_WIDTH, "routes_by": "ridge"}
REPLAY_FREE_PIPELINE = ("host", "owners", "router", "gate")
MAX_LENGTH = 128  # tokens: the federation plan's default (redkit/federated/plan.py)
DOMAIN_PARTS = (("experts", "residual"), ("label_rows",), (STATISTICS,), (DENSITY,))  # what one domain's owner builds
HOST_PARTS = (("backbone_top",), ("classifier",))  # what every owner trains through, trained by nobody


def is_replay_free(config) -> bool:
    return getattr(config, "recipe", POOLED) == REPLAY_FREE


def has_tuned_owners(config) -> bool:
    """Whether each owner tunes its own top layers (`--owner-experts tuned`: tuned_owners.py) rather than training a
    residual expert on the frozen features."""
    return getattr(config, "owner_experts", RESIDUAL) == TUNED


def domain_parts(config) -> tuple[tuple[str, ...], ...]:
    """What one domain's owner builds in a run of `config` (each part's path under modules/, before the domain)."""
    return TUNED_PARTS if has_tuned_owners(config) else DOMAIN_PARTS


def pipeline_of(config) -> tuple[str, ...]:
    """The stages a run of `config` trains, in order (a pooled run's references after RED's stages)."""
    if is_replay_free(config):
        return REPLAY_FREE_PIPELINE
    return PIPELINE + tuple(getattr(config, "references", ()))


def own_label_rows(labels: tuple[str, ...], label_domains: tuple[str, ...], where: str) -> dict[str, tuple[str, ...]]:
    """{domain: its labels, in the run's label order}: each label output by its one domain's rows; `label_domains`
    empty means some label occurs in two domains, which this recipe cannot serve (one line)."""
    if not label_domains:
        raise RedkitError(
            f"{where}: a label occurs in two domains; in the replay-free recipe each label belongs to one domain's "
            "label rows (there is no shared classifier trained on every domain to output it)"
        )
    rows: dict[str, tuple[str, ...]] = {}
    for label, domain in zip(labels, label_domains):
        rows[domain] = rows.get(domain, ()) + (label,)
    return rows


def write_host(run, fingerprint: str, seed: int) -> None:
    """`run`'s backbone_top (the pretrained top, untouched) and classifier C over no label."""
    backbone = run.backbone
    top = backbone.top_config()
    metrics = {"trained": False}
    save_module(
        run.module_dir("backbone_top"),
        backbone.top_state_dict(),
        ModuleMeta("backbone_top", top, fingerprint, seed=seed, metrics=metrics),
    )
    torch.manual_seed(seed)
    classifier = Classifier(Classifier.Config(backbone.hidden_size, 0))  # (B, d) -> (B, 0)
    meta = ModuleMeta("classifier", vars(classifier.config), fingerprint, seed=seed, metrics=metrics)
    save_module(run.module_dir("classifier"), classifier, meta)


@STAGES.register("host")
def stage_host(run) -> dict:
    if all(module_exists(run.module_dir(*part)) for part in HOST_PARTS):
        return {"skipped": "host"}
    write_host(run, run.backbone.fingerprint(), run.config.seed)
    return {"modules": [str(run.module_dir(*part)) for part in HOST_PARTS], "trained": False}


def domain_tensors(run, domain: str, split: str, labels: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(h (N, d), y (N,)) of `domain`'s examples of `split` alone: the features of its own texts, encoded alone (the
    same numbers whichever other domains the run holds), y indexing `labels` (its rows')."""
    texts, y = domain_examples(run, domain, split, labels)
    return run.text_features(f"{split}-{check_name(domain, 'domain', str(run.dir))}", texts), y


def train_domain(run, domain: str) -> dict:
    """`domain`'s residual expert, label rows, routing statistics and density, trained on its own data alone and
    saved; skipped when all four exist. The one implementation behind every replay-free path (module docstring).
    With tuned owners (`--owner-experts tuned`), its tuned top layers instead of the residual expert
    (tuned_owners.py)."""
    if has_tuned_owners(run.config):
        return train_tuned_domain(run, domain)
    pending = pending_owner(run, domain, DOMAIN_PARTS)
    if pending is None:
        return {"skipped": domain}
    dirs, labels = pending

    def work() -> dict:
        train, val = (domain_tensors(run, domain, split, labels) for split in ("train", "val"))
        projection = routing_projection(run)
        rows_dir = dirs[("label_rows",)]
        share = train_owner_share(
            domain,
            labels,
            train,
            val,
            seed=owner_seed(run.config.seed, domain),
            projection=projection,
            rank=run.config.expert_rank,
            config=run.config.train_config("experts"),
            checkpoint_dir=rows_dir,
            log=run.log,
        )
        result = share.result
        # rows named "domain/label": the router reads the domain off them
        named = replace(share.statistics, labels=tuple(f"{domain}/{label}" for label in labels))
        statistics = DomainStatistics.of(named, projection, run.feature_dim, statistics_rank(run))
        # The owner's Gaussians of its own adapted features, calibrated on its own val; on one thread, as the
        # share is trained, so that every path computes the same bits (BLAS's sums depend on its threads).
        with torch.no_grad(), one_thread():
            adapted = [x + share.expert(x) for x in (train[0], val[0])]  # (N, d) each
            density = OwnerDensity.of(adapted[0], train[1], labels, adapted[1])
        index = run.space.domains.index(domain)
        metrics = {
            "best_val_loss": result.best_val_loss,
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "seconds": result.seconds,
            "examples": len(train[0]),
        }
        for part, module in zip(DOMAIN_PARTS, (share.expert, share.rows, statistics, density)):
            meta = ModuleMeta(
                part[-1], vars(module.config), run.fingerprint, "", run.config.seed, index, metrics=metrics
            )
            save_module(dirs[part], module, meta)
        Checkpoint(rows_dir).remove()
        return {"domain": domain, "labels": len(labels), "examples": len(train[0]), "epochs": result.epochs}

    return timed(run, "owners", work)


@STAGES.register("owners")
def stage_owners(run, domains: list[str] | None = None) -> dict:
    """Every domain's modules (or `domains`' by name), one domain at a time (train_domain)."""
    for domain in domains or ():
        if domain not in run.space.domains:
            raise RedkitError(f"--domain {domain!r}: not a domain of {run.dir} ({', '.join(run.space.domains)})")
    return {domain: train_domain(run, domain) for domain in domains or run.space.domains}


def check_stage(config, stage: str, where) -> None:
    """One line where `stage` is not a stage of a run of `config`'s recipe (before anything is written)."""
    if is_replay_free(config) and stage not in REPLAY_FREE_PIPELINE:
        raise RedkitError(
            f"{where}: stage {stage} trains on pooled data; this run is of the replay-free recipe (its stages: "
            f"{', '.join(REPLAY_FREE_PIPELINE)})"
        )
    if not is_replay_free(config) and stage in set(REPLAY_FREE_PIPELINE) - set(PIPELINE):
        raise RedkitError(f"{where}: stage {stage} belongs to the replay-free recipe (redkit fit --recipe replay-free)")
