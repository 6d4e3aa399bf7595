"""A RED model as an artifact: `save_pretrained(dir)` / `from_pretrained(dir)`, the one directory
format RED reads (a run's modules are assembled into a REDModel by the run layer: redkit/run/red.py).

    DIR/model.safetensors   every weight (classifier.*, experts.<i>.*, router.*); written first
    DIR/config.json         {"format", "redkit_version", "config": REDConfig, "card": provenance + metrics}
    DIR/README.md           the model card: what it is, its metrics, where it came from

A directory with a config.json is complete (weights first, config last, each atomic), as for modules.
"""

from pathlib import Path

from redkit.atomic import atomic_path, write_json, write_text
from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.modules.store import CONFIG, WEIGHTS, read_weights
from redkit.red.config import REDConfig

FORMAT = "redkit.red"
README = "README.md"
CARD_METRICS = ("accuracy", "macro_f1", "range_accuracy")


def save_pretrained(model, directory: Path) -> Path:
    from safetensors.torch import save_file

    from redkit import __version__

    if model.router is None:
        raise RedkitError("save_pretrained: this RED model has no router yet; train or give one first")
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory / WEIGHTS) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, str(tmp))
    write_text(directory / README, model_card(model.config, model.card))
    write_json(
        directory / CONFIG,
        {"format": FORMAT, "redkit_version": __version__, "config": model.config.to_dict(), "card": model.card},
    )
    return directory


def load_pretrained(cls, directory: Path, fingerprint: str | None = None):
    file = directory / CONFIG
    if not file.is_file() or not (directory / WEIGHTS).is_file():
        raise RedkitError(f"{directory}: no saved RED model here (expected {CONFIG} and {WEIGHTS})")
    raw = read_json(file, "a RED model config")
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise RedkitError(f"{file}: not a saved RED model (field 'format' is not {FORMAT!r})")
    card = raw.get("card") or {}
    if fingerprint is not None and card.get("backbone_fingerprint") != fingerprint:
        raise RedkitError(
            f"{directory}: this RED model was trained on backbone {card.get('backbone_fingerprint')}, "
            f"but yours is {fingerprint}; retrain it for this backbone"
        )
    model = cls(REDConfig.from_dict(raw.get("config"), file))
    try:
        model.load_state_dict(read_weights(directory / WEIGHTS))
    except RuntimeError as err:
        raise RedkitError(
            f"{directory / WEIGHTS}: weights do not fit the RED model of {file} ({str(err).splitlines()[0]})"
        ) from None
    model.card = card
    return model.eval()


def model_card(config: REDConfig, card: dict) -> str:
    lines = [
        f"# RED model: {config.num_experts} experts over {config.num_classes} classes",
        "",
        "Residual Expert Decomposition (redkit): `logits = C(h + Σ_i α_i(h) Δh_i(h))`, "
        "`Δh_i = B_i σ(A_i h)`, on pooled features h.",
        "",
        "| field | value |",
        "| --- | --- |",
        f"| width d | {config.dim} |",
        f"| classes C | {config.num_classes} |",
        f"| experts (domains) | {', '.join(config.domains)} |",
        f"| expert kind, rank | {config.expert_kind}, {config.rank if config.expert_kind == 'residual' else '-'} |",
        f"| router | {config.router} |",
    ]
    for key in ("run", "task", "backbone_fingerprint", "data_hash", "seed", "git_commit"):
        if card.get(key) is not None:
            lines.append(f"| {key.replace('_', ' ')} | {card[key]} |")
    if card.get("metrics"):
        lines += [
            "",
            "## Metrics (the run's results.json)",
            "",
            "| split | composition | n | " + " | ".join(CARD_METRICS) + " |",
            "| --- | --- | --- |" + " --- |" * len(CARD_METRICS),
        ]
        for split, rows in card["metrics"].items():
            for name, row in rows.items():
                cells = " | ".join(f"{row[k]:.4f}" if isinstance(row.get(k), float) else "-" for k in CARD_METRICS)
                lines.append(f"| {split} | {name} | {row.get('n')} | {cells} |")
    if card.get("versions"):
        lines += ["", "## Provenance", "", ", ".join(f"{k} {v}" for k, v in card["versions"].items())]
    lines += [
        "",
        "Load with `redkit.REDModel.from_pretrained(DIR)`; it acts on features of the backbone "
        "whose fingerprint is above.",
        "",
    ]
    return "\n".join(lines)
