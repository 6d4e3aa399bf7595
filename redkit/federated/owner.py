"""One owner's contribution, computed where its data lives, from its data alone.

    train_contribution(plan, DATA, WORK)   WORK: the owner's own fit run (its data never leaves it)
        host (plan.py) ─► each of its domains' modules, trained alone on that domain's examples by the replay-free
                      recipe of `redkit fit` (redkit/fitting/replay_free.py: train_domain, the one implementation):
            experts/residual/<d> + label_rows/<d>   Δh_d and R_d over d's labels
              (experts/tuned/<d>: its own top layers, in a plan of tuned owners: plan.py)
            statistics/<d>                          counts, means, scatter of φ(h): its share of the router
            density/<d>                             its class Gaussians of its adapted features (the OOS score)
        (a plan with secure_aggregation: statistics/<d> without its scatter; Σ of them kept in WORK for the secure
         round: scatter_share.py)
    ─► {"files": {"modules/<part>/<name>": {size, sha256}}, "domains", "label_rows", "fingerprint", "dim", ...}

What leaves the owner is `package(...)` (upload.py): those module files (weights and their JSON configs) and the
manifest, no example and no feature. Each domain's seed comes from the plan's seed and the domain's name alone, so
a contribution is the same whichever machine computes it, and whenever, and its modules are the same bytes as `redkit fit --recipe
replay-free` builds of those domains (tests/test_federated.py, tests/test_replay_free_recipe.py).
"""

import time
from pathlib import Path

from redkit.atomic import write_json
from redkit.bundle.manifest import file_entry
from redkit.federated.plan import FederationPlan, write_host
from redkit.federated.scatter_share import withhold_scatters
from redkit.federated.upload import MANIFEST
from redkit.fitting.config import FitConfig
from redkit.fitting.data import label_domains as fitted_label_domains
from redkit.fitting.data import load_fit_data
from redkit.fitting.records import Fields
from redkit.fitting.replay_free import own_label_rows, train_domain
from redkit.fitting.run import FitRun
from redkit.jsonfile import read_json
from redkit.train.stages import stage_line

FORMAT = 1


def owner_config(plan: FederationPlan, data, data_dir: Path) -> FitConfig:
    """The owner's run: the plan's settings (the replay-free recipe), its own domains, each of its labels in its
    domain's label rows."""
    label_domains = fitted_label_domains(data)
    config = FitConfig(
        data_dir=str(data_dir),
        **plan.config_fields(),
        labels=data.labels,
        numeric_labels=data.numeric_labels,
        domains=data.domains,
        label_domains=label_domains,
        label_rows=own_label_rows(data.labels, label_domains, str(data_dir)),
    )
    config.cap_epochs(plan.max_epochs)
    return config


def train_contribution(plan: FederationPlan, data_dir: Path, work: Path, print_fn=print) -> dict:
    """Train the owner of `data_dir`'s modules in `work` (its own run); returns the manifest (also written to
    work/contribution.json). A finished contribution is reused: the same data, the same modules."""
    work, data_dir = Path(work), Path(data_dir).resolve()
    if (work / MANIFEST).is_file():
        return read_json(work / MANIFEST, "a contribution manifest")
    wall = time.perf_counter()
    data = load_fit_data(data_dir, Fields("text", "label", "domain"), plan.seed, plan.val_fraction)
    run = FitRun(work, owner_config(plan, data, data_dir))
    run.prepare_data(data)
    write_host(run, plan)
    for domain in run.space.domains:
        print_fn(stage_line(f"owner {domain}", train_domain(run, domain)))
    if plan.secure_aggregation:
        withhold_scatters(run)
    parts = [(*part, d) for d in run.space.domains for part in plan.parts()]
    files = {
        str(Path("modules", *p, name)): file_entry(run.module_dir(*p) / name)
        for p in parts
        for name in ("config.json", "model.safetensors")
    }
    manifest = {
        "format": FORMAT,
        "domains": list(run.space.domains),
        "label_rows": {d: list(run.config.label_rows[d]) for d in run.space.domains},
        "fingerprint": run.fingerprint,
        "dim": run.feature_dim,
        "router_options": dict(plan.router_options),
        "owner_experts": plan.owner_experts,
        "files": files,
        "examples": {name: len(records) for name, records in run.splits.items()},  # counted, never sent
        "seconds": time.perf_counter() - wall,
    }
    write_json(work / MANIFEST, manifest)  # last: a work directory with a manifest is a finished contribution
    return manifest
