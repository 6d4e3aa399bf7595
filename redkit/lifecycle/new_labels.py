"""A new domain with labels the run cannot predict (never seen, or taken out with a removed
domain): it brings its own *label rows*.

The shared classifier C was trained in stage base and is frozen; it cannot output a label it has
no row for. So a domain that brings new labels also brings a small `LabelRows` module R_a over
them, and the run's effective classifier becomes C's rows followed by each added domain's rows
(redkit/modules/labels.py); a label a removed domain took with it is masked in C, and the
domain's rows output it instead when it comes back. R_a is trained *alone*, on the new domain's data only, together with
that domain's residual expert, through the frozen C:

    logits = [C(h + Δh_a) ; R_a(h + Δh_a)]      (B, C_0 + |new|),  C frozen, Δh_a and R_a trained
    loss   = cross-entropy over all of them     (the new domain's examples: their labels, old or new)

Training through the frozen C is what puts old and new logits on one scale: R_a's logits must beat
C's on the new domain's queries, and nothing else. Nothing of the other domains is seen, so
nothing keeps R_a's logits low on *their* queries; two safeguards follow from the run's structure
rather than from their data: the router (retrained over every domain) sends an old domain's query to
its own expert, and the label-structure composition `red_per_domain` only lets a domain's labels compete
within that domain, weighting each domain by α. Old domains' full heads (baselines) score the new
labels as impossible (-inf), and the global heads cannot output them at all: both were trained
before the labels existed. The fairness of the result is measured, not assumed: per-domain accuracy
before and after (add-domain's report, and `redkit study lifecycle`).
"""

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.labels import JoinedClassifier, label_layout
from redkit.modules.layers import MODULES, LabelRows
from redkit.modules.store import load_module, module_exists, save_module
from redkit.threads import one_thread
from redkit.train.loop import Checkpoint, fit
from redkit.train.stages import domain_rows, module_meta, timed


def train_label_rows(run, domain: int) -> dict:
    """Train domain `domain`'s residual expert and label rows (its labels: `run.config.label_rows`),
    alone on its own data, and save both; skipped when both exist. The expert's seed is the one
    stage experts would give it, so that its initial weights match an expert trained there."""
    name = run.space.domains[domain]
    expert_dir, rows_dir = run.module_dir("experts", "residual", name), run.module_dir("label_rows", name)
    if module_exists(expert_dir) and module_exists(rows_dir):
        return {"skipped": str(rows_dir)}

    def work() -> dict:
        layout = label_layout(run)
        classifier = load_module(run.module_dir("classifier"), run.fingerprint, run.feature_dim)[0].requires_grad_(
            False
        )
        dim = run.feature_dim
        torch.manual_seed(run.config.seed * 1000 + domain)  # stage experts' seed for this domain
        expert = MODULES["residual"](MODULES["residual"].Config(dim=dim, rank=run.config.expert_rank or dim // 4))
        labels = tuple(run.config.label_rows[name])
        rows = LabelRows(LabelRows.Config(dim=dim, num_classes=len(labels), labels=labels))
        others = {
            d: load_module(run.module_dir("label_rows", d), run.fingerprint, dim)[0].requires_grad_(False)
            for d in layout.rows
            if d != name
        }  # earlier added domains' rows: frozen, like C
        joined = JoinedClassifier(classifier, others | {name: rows}, layout)
        # Δh_a and R_a learn (C and earlier rows frozen); the loss is stage experts' own: the expert
        # alone through the classifier, here the joined one, C(h + Δh_a) ; R_a(h + Δh_a)  (B, C)
        model = nn.ModuleDict({"expert": expert, "classifier": joined}).to(run.device)
        logits = lambda x: expert.alone_logits(x, joined)  # noqa: E731
        h, y, d = run.split_tensors("train")
        vh, vy, vd = run.split_tensors("val")
        tr, va = domain_rows(d, domain), domain_rows(vd, domain)
        train, val = (h[tr].to(run.device), y[tr].to(run.device)), (vh[va].to(run.device), vy[va].to(run.device))
        with one_thread():  # small modules: thread hand-offs cost more than their arithmetic (as stage experts)
            result = fit(
                model,
                lambda idx: F.cross_entropy(logits(train[0][idx]), train[1][idx]),
                len(train[0]),
                lambda: F.cross_entropy(logits(val[0]), val[1]).item(),
                run.config.train_config("experts"),
                seed=run.config.seed + domain,
                checkpoint_dir=rows_dir,
                desc=f"label rows {name}",
                log=run.log,
            )
        model.cpu()
        save_module(expert_dir, expert, module_meta(run, expert, "residual", domain, result))
        save_module(rows_dir, rows, module_meta(run, rows, "label_rows", domain, result))
        Checkpoint(rows_dir).remove()
        return {
            "label_rows": str(rows_dir),
            "labels": len(labels),
            "epochs": result.epochs,
            "best_val_loss": result.best_val_loss,
        }

    return timed(run, "experts", work)
