"""The routing-quality protocol's tables from the measurements of every seed, and the verdict on each hypothesis.

Every number is a mean over seeds (± sd where shown); a claim "A better than B" is tested with the
paired t-test over seeds (redkit_experiments.study.stats): it *holds* when A is better with p < 0.05, *does not
hold* when B is better with p < 0.05, and otherwise we *cannot tell* (always so with one seed).

    H1  task performance   SPECTRA's held-out loss is lower than Switch top-2's
    H2  specialisation     SPECTRA's expert overlap (Jaccard) and Gram cosine are lower than top-2's
    H3  stability          SPECTRA's routing consistency across checkpoints is higher than top-2's
    H4  efficiency         SPECTRA's training step costs at most 10% more than top-2's (t interval
                           of the ratio over seeds entirely below 1.10: holds; entirely above: does not)
    H5  ablations          removing any one component (expression, GRU, speciality, orthogonality,
                           Sinkhorn + quota) raises the held-out loss
    R   replacement        swapping SPECTRA into the trained stock model and continuing beats
                           continuing with the stock gate (held-out loss)
"""

import numpy as np

from redkit_experiments.spectra.corpus import DOMAINS
from redkit_experiments.spectra.measure import LAYER_SCALARS
from redkit_experiments.study.stats import paired_t_p, t_interval, verdict

SPECTRA, TOP2 = "spectra", "switch top-2"
ABLATIONS = ("spectra -expression", "spectra -gru", "spectra -speciality", "spectra -ortho", "spectra -sinkhorn")
TABLE7 = (
    "spectra",
    "spectra -expression",
    "spectra -gru",
    "spectra +gru layers",
    "spectra -speciality",
    "spectra -ortho",
    "spectra -sinkhorn",
    "spectra -all",
)
OVERHEAD_LIMIT = 1.10
STABILITY_FROM = 0.5  # Table 12 reads the checkpoints of the second half of training


def stability(log: list[dict]) -> dict:
    """Routing consistency (mean top-1 agreement with the previous checkpoint, %), usage variance
    (sd over checkpoints of each expert's share of assignments, mean over experts and layers) and
    Kendall τ of expert usage between consecutive checkpoints, over the second half of training."""
    last = log[-1]["step"]
    rows = [r for r in log if r["step"] >= STABILITY_FROM * last]
    pairs = [layer for r in rows if r["vs_previous"] for layer in r["vs_previous"]]
    loads = np.array([r["load_topk"] for r in rows], dtype=float)  # (checkpoints, layers, E)
    shares = loads / loads.sum(axis=2, keepdims=True)
    taus = [p["kendall_tau"] for p in pairs if p["kendall_tau"] == p["kendall_tau"]]  # NaN: a constant usage
    return {
        "consistency": 100 * float(np.mean([p["agreement"] for p in pairs])) if pairs else float("nan"),
        "usage_sd": float(shares.std(axis=0).mean()),
        "kendall_tau": float(np.mean(taus)) if taus else float("nan"),
        "checkpoints": len(rows),
    }


def _values(per_seed: list[dict], getter) -> list[float]:
    return [float(getter(seed)) for seed in per_seed]


def _stat(values: list[float]) -> dict:
    return t_interval(values) | {"per_seed": values}


def claim(a_values: list[float], b_values: list[float], lower_is_better: bool) -> dict:
    """A better than B, per seed values of each."""
    a, b = np.array(a_values), np.array(b_values)
    diffs = (b - a) if lower_is_better else (a - b)  # positive: A better
    p = paired_t_p(a, b)
    said = verdict(diffs, p)
    return {
        "a": a_values,
        "b": b_values,
        "difference": t_interval(diffs),
        "paired_t_p": p,
        "verdict": "does not hold" if said == "reversed" else said,
    }


def combine(verdicts: list[str]) -> str:
    if any(v == "does not hold" for v in verdicts):
        return "does not hold"
    return "holds" if verdicts and all(v == "holds" for v in verdicts) else "cannot tell"


def aggregate(results: dict) -> dict:
    per_seed = results["per_seed"]
    names = list(per_seed[0]["variants"])
    meas = lambda name: lambda s: s["variants"][name]["measure"]  # noqa: E731
    tables: dict = {
        "6.1": {},
        "6.2": {},
        "6.2_layers": {},
        "affinity": {},
        "7": {},
        "12": {},
        "11": {},
        "replacement": {},
    }
    for name in names:
        tables["6.1"][name] = {"loss": _stat(_values(per_seed, lambda s: meas(name)(s)["loss"]))} | {
            d: _stat(_values(per_seed, lambda s: meas(name)(s)["per_domain"][d]["loss"])) for d in DOMAINS
        }
        tables["6.2"][name] = {
            key: _stat(_values(per_seed, lambda s: meas(name)(s)["mean"][key])) for key in LAYER_SCALARS
        }
        layers = len(meas(name)(per_seed[0])["layers"])
        tables["6.2_layers"][name] = [
            {
                key: float(np.mean(_values(per_seed, lambda s: meas(name)(s)["layers"][layer][key])))
                for key in LAYER_SCALARS
            }
            for layer in range(layers)
        ]
        tables["affinity"][name] = [
            np.mean([meas(name)(s)["layers"][layer]["affinity"] for s in per_seed], axis=0).tolist()
            for layer in range(layers)
        ]
        tables["12"][name] = {
            key: _stat(_values(per_seed, lambda s: stability(s["variants"][name]["routing_log"])[key]))
            for key in ("consistency", "usage_sd", "kendall_tau")
        }
        tables["12"][name]["seconds_per_step"] = _stat(
            _values(per_seed, lambda s: s["variants"][name]["seconds_per_step"])
        )
    for experts in [
        str(e) for e in sorted(results["config"]["sweep"])
    ]:  # the E asked for, over the seeds that ran them
        swept = [s for s in per_seed if experts in s["sweep"]]
        row = lambda s, name: s["sweep"][experts][name]["measure"]  # noqa: E731
        tables["11"][experts] = {
            name: {"loss": _stat(_values(swept, lambda s: row(s, name)["loss"]))}
            | {
                key: _stat(_values(swept, lambda s: row(s, name)["mean"][key]))
                for key in ("expert_entropy", "gram_ortho")
            }
            for name in (swept[0]["sweep"][experts] if swept else {})
        }
    for arm in per_seed[0]["replacement"]:
        m = lambda s: s["replacement"][arm]["measure"]  # noqa: E731
        tables["replacement"][arm] = (
            {"loss": _stat(_values(per_seed, lambda s: m(s)["loss"]))}
            | {d: _stat(_values(per_seed, lambda s: m(s)["per_domain"][d]["loss"])) for d in DOMAINS}
            | {key: _stat(_values(per_seed, lambda s: m(s)["mean"][key])) for key in LAYER_SCALARS}
        )
    tables["hypotheses"] = hypotheses(tables, per_seed, results.get("overhead"))
    return tables


def hypotheses(tables: dict, per_seed: list[dict], overhead: dict | None) -> dict:
    have = set(tables["6.1"])
    out: dict = {}
    per = lambda table, name, key: tables[table][name][key]["per_seed"]  # noqa: E731
    if {SPECTRA, TOP2} <= have:
        out["H1"] = claim(per("6.1", SPECTRA, "loss"), per("6.1", TOP2, "loss"), lower_is_better=True)
        parts = {
            key: claim(per("6.2", SPECTRA, key), per("6.2", TOP2, key), lower_is_better=True)
            for key in ("jaccard_mean", "gram_ortho")
        }
        out["H2"] = {"parts": parts, "verdict": combine([p["verdict"] for p in parts.values()])}
        out["H3"] = claim(per("12", SPECTRA, "consistency"), per("12", TOP2, "consistency"), lower_is_better=False)
        ratio = np.array(per("12", SPECTRA, "seconds_per_step")) / np.array(per("12", TOP2, "seconds_per_step"))
        interval = t_interval(ratio)
        said = (
            (
                "holds"
                if interval["high"] < OVERHEAD_LIMIT
                else "does not hold"
                if interval["low"] > OVERHEAD_LIMIT
                else "cannot tell"
            )
            if len(ratio) > 1
            else "cannot tell"
        )
        out["H4"] = {
            "step_time_ratio": interval | {"per_seed": ratio.tolist()},
            "limit": OVERHEAD_LIMIT,
            "verdict": said,
            "routing_share_of_block": overhead["routing_share"] if overhead else None,
        }
    present = [a for a in ABLATIONS if a in have]
    if SPECTRA in have and present:
        parts = {a: claim(per("6.1", SPECTRA, "loss"), per("6.1", a, "loss"), lower_is_better=True) for a in present}
        out["H5"] = {"parts": parts, "verdict": combine([p["verdict"] for p in parts.values()])}
    if {"continue stock", "swap in spectra"} <= set(tables["replacement"]):
        r = tables["replacement"]
        out["R"] = claim(
            r["swap in spectra"]["loss"]["per_seed"], r["continue stock"]["loss"]["per_seed"], lower_is_better=True
        )
    return out
