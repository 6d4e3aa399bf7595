"""A stage's outcome in one line, as `redkit train` and the life cycle print it."""


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
