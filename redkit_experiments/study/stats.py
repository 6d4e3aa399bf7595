"""Statistics shared by the studies: pure functions over arrays, scipy for the distributions."""

import numpy as np
from scipy import stats


def t_interval(values, confidence: float = 0.95) -> dict:
    """Mean, standard deviation and Student-t interval of the mean of `values` (n ≥ 1).

    With n = 1, or values that do not vary, the interval is the mean itself."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * sd / np.sqrt(len(x))) if sd > 0 else 0.0
    return {"n": int(len(x)), "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}


def paired_t_p(a, b) -> float | None:
    """p of the paired t-test of a against b (one value per seed each); None when the differences
    do not vary across seeds (a spread below 1e-9 is float rounding): then we cannot tell."""
    diffs = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return float(stats.ttest_rel(a, b).pvalue) if len(diffs) > 1 and np.ptp(diffs) > 1e-9 else None


def verdict(diffs, p: float | None) -> str:
    """Of the claim "A is better than B", from A − B per seed (positive = A better) and the paired
    t-test's p."""
    if p is not None and p < 0.05:
        return "holds" if np.mean(diffs) > 0 else "reversed"
    return "cannot tell"


def area_under(levels, values) -> float:
    """Trapezoid area under values(levels) divided by the span of the levels: the curve's mean
    height, so that scores of noise models with different ranges read alike (1 = never hurt)."""
    levels, values = np.asarray(levels, dtype=float), np.asarray(values, dtype=float)
    span = levels[-1] - levels[0]
    return float(np.trapezoid(values, levels) / span) if span > 0 else float(values[0])
