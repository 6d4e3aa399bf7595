"""The replay-free recipe with tuned owners (`redkit fit --recipe replay-free --owner-experts tuned`): each domain's
owner tunes its own copy of the backbone's top layers and rows over its own labels on its own data alone, and sends
the statistics the router needs and its density (redkit/incremental/tuned.py says what each piece is and why).

    experts/tuned/<d>   its top layers (Backbone.top_state_dict keys), tuned from the pretrained ones
    label_rows/<d>      R_d over d's labels, on the pooled output of its top layers
    statistics/<d>      counts, class means and scatter of φ(r), r = [h, lower] (2d), M = 4,096
    density/<d>         its class Gaussians of its tuned features, calibrated on its own val

The host (the pretrained top, C over no label) and the router and gate stages are the replay-free recipe's
(replay_free.py); the router is the ridge from the summed statistics, routing to one owner (routes_by "ridge").
A query is then answered through the run's TunedEncoder (tuned_encoder.py): r and every owner's pooled top output.

One implementation: `train_tuned_expert` is what the study's `red_tuned` (redkit_experiments/incremental) calls,
with the same `owner_seed` and the fit recipe's training settings (stage "owners": redkit/fitting/recipe.py TUNING).
"""

import torch

from redkit.backbone import Backbone
from redkit.features import PrefixStates, cached_features
from redkit.fitting.owner_data import domain_examples, pending_owner
from redkit.incremental.owner import owner_seed
from redkit.incremental.statistics import ClassStatistics
from redkit.incremental.tuned import router_input, train_tuned_expert
from redkit.modules.store import ModuleMeta, save_module
from redkit.names import check_name
from redkit.oos.owner_density import DENSITY, OwnerDensity
from redkit.routers.gaussian import STATISTICS, DomainStatistics, routing_dim, routing_projection, statistics_rank
from redkit.threads import one_thread
from redkit.train.loop import Checkpoint
from redkit.train.stages import timed

TUNED_TOP = "tuned_top"  # the module kind of experts/tuned/<d>: a state dict of top layers, loaded by load_state
TUNED_PARTS = (("experts", "tuned"), ("label_rows",), (STATISTICS,), (DENSITY,))  # what one tuned owner builds


def train_tuned_domain(run, domain: str) -> dict:
    """`domain`'s tuned top layers, label rows, routing statistics and density, trained on its own data alone and
    saved; skipped when all four exist."""
    pending = pending_owner(run, domain, TUNED_PARTS)
    if pending is None:
        return {"skipped": domain}
    dirs, labels = pending

    def work() -> dict:
        name = check_name(domain, "domain", str(run.dir))
        backbone = Backbone(run.config.backbone).to(run.device)  # a working copy: the owner's top is trained in it
        pretrained_top = {k: v.detach().clone() for k, v in backbone.top_state_dict().items()}
        splits = {}
        for split in ("train", "val"):
            texts, y = domain_examples(run, domain, split, labels)
            prefix = PrefixStates.build(run.cache_dir, backbone, texts, f"{split}-{name}")  # (N, T, d) frozen states
            h = cached_features(run.cache_dir, run.backbone, texts, f"{split}-{name}")  # (N, d) pretrained, pooled
            splits[split] = (prefix, y, h)
        (prefix, y, h), (val_prefix, val_y, _) = splits["train"], splits["val"]
        rows_dir = dirs[("label_rows",)]
        expert = train_tuned_expert(
            backbone,
            pretrained_top,
            labels,
            (prefix, y),
            (val_prefix, val_y),
            seed=owner_seed(run.config.seed, domain),
            config=run.config.train_config("owners"),
            device=run.device,
            desc=f"owner {domain}",
            checkpoint_dir=rows_dir,
            log=run.log,
        )
        projection = routing_projection(run)
        with torch.no_grad():  # rows named "domain/label": the router reads the domain off them
            named = tuple(f"{domain}/{label}" for label in labels)
            stats = ClassStatistics.of(projection(router_input(h, prefix.states, prefix.attention_mask)), y, named)
        statistics = DomainStatistics.of(stats, projection, routing_dim(run), statistics_rank(run))
        # On one thread, as the density of the residual recipe: the same bits whichever path computes it.
        with torch.no_grad(), one_thread():
            tuned = [expert.pooled(backbone, p, run.device).cpu() for p in (prefix, val_prefix)]  # (N, d) each
            density = OwnerDensity.of(tuned[0], y, labels, tuned[1])
        result = expert.result
        metrics = {
            "best_val_accuracy": result.best_val_accuracy,
            "best_val_loss": result.best_val_loss,
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "seconds": result.seconds,
            "examples": len(y),
        }
        index = run.space.domains.index(domain)
        top_config = backbone.top_config(path=False)  # sent to the server: no path of the owner's machine
        configs = (top_config, vars(expert.rows.config), vars(statistics.config), vars(density.config))
        kinds = (TUNED_TOP, "label_rows", STATISTICS, DENSITY)
        for part, module, kind, config in zip(
            TUNED_PARTS, (expert.top, expert.rows, statistics, density), kinds, configs
        ):
            meta = ModuleMeta(kind, config, run.fingerprint, "", run.config.seed, index, metrics=metrics)
            save_module(dirs[part], module, meta)
        Checkpoint(rows_dir).remove()
        return {"domain": domain, "labels": len(labels), "examples": len(y), "epochs": result.epochs}

    return timed(run, "owners", work)
