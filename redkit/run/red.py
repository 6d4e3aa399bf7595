"""A trained run's RED model and its sequence classifier, assembled from the run's modules (a run
directory or a bundle). RED itself reads only its own directory format (redkit/red/pretrained.py);
this is where a run becomes one.

    red_model(run)                   C, the run's experts and router as one REDModel, with a model card
    sequence_classifier(run, red)    the run's tuned backbone, tokenizer and pooling around a REDModel
"""

from redkit.errors import RedkitError
from redkit.modules.store import load_module
from redkit.red import REDModel
from redkit.red.pretrained import CARD_METRICS


def red_model(run, kind: str = "residual") -> REDModel:
    """The RED model of a trained run: its classifier, `kind` experts and router, each checked
    against the run's backbone fingerprint and width."""

    def load(*parts: str):
        return load_module(run.module_dir(*parts), run.fingerprint, run.feature_dim)[0]

    model = REDModel.from_parts(
        load("classifier"),
        [load("experts", kind, name) for name in run.space.domains],
        tuple(run.space.domains),
        router=load("router"),
        labels=run.space.class_names(),
        pooling=run.config.backbone.pooling,
    )
    model.card = run_card(run)
    return model.to(run.device).eval()


def run_card(run) -> dict:
    """Where a run's RED model came from, and how well RED did on each evaluated split."""
    results = run.read_results()
    metrics = {}
    for split, table in (results.get("splits") or {}).items():
        for name in ("red", "red_oracle", "red_uniform"):
            if isinstance(table, dict) and isinstance(table.get(name), dict):
                row = {key: table[name][key] for key in CARD_METRICS if key in table[name]}
                metrics.setdefault(split, {})[name] = row | {"n": table[name].get("n")}
    provenance = results.get("provenance") or {}
    return {
        "run": str(run.dir),
        "task": results.get("task"),
        "backbone_fingerprint": run.fingerprint,
        "data_hash": run.data_hash,
        "seed": run.config.seed,
        "git_commit": provenance.get("git_commit"),
        "versions": provenance.get("versions", {}),
        "metrics": metrics,
    }


def sequence_classifier(run, red: REDModel | None = None):
    """The run's backbone (its tuned top layers loaded), tokenizer and pooling around its RED model
    (or `red`, e.g. one loaded with from_pretrained, checked against this backbone)."""
    from redkit.red.hf import REDForSequenceClassification

    backbone = run.backbone
    if red is None:
        red = red_model(run)
    elif red.card.get("backbone_fingerprint") not in (None, run.fingerprint):
        raise RedkitError(
            f"{run.dir}: its backbone is {run.fingerprint}, the RED model was trained on "
            f"{red.card['backbone_fingerprint']}"
        )
    if red.config.pooling != backbone.config.pooling:
        raise RedkitError(
            f"{run.dir}: pools with {backbone.config.pooling!r}, the RED config says {red.config.pooling!r}"
        )
    return REDForSequenceClassification(backbone.model, red, backbone.tokenizer, backbone.config.max_length).eval()
