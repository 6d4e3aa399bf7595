"""The two thresholds the replay-free out-of-scope figures are read at, on any in-scope score: Larson et al.'s
(the study's: the best pooled accuracy on val and oos_val) and issue 44's operating point (the threshold on val
that rejects the most OOS queries while giving up at most one point of val in-scope accuracy).

Evaluation only, for the scripts that score more than the study's maximum softmax probability; not in any method's
figures (the study does not import it, so redkit/oos/threshold.py, which the study does, stays as it is).
"""

import numpy as np

from redkit.oos.threshold import choose_threshold, oos_metrics, rates

GIVE_UP = 0.01  # the operating point: at most 1 point of val in-scope accuracy given up to reject


def at_most_one_point(val: tuple, test: tuple) -> dict:
    """OOS recall at the threshold that rejects the most val OOS queries while giving up at most GIVE_UP of val
    in-scope accuracy; val and test are (in-scope scores (N,), in-scope right (N,) bool, OOS scores (M,))."""
    in_scores, in_right, oos = val
    floor = float(in_right.mean()) - GIVE_UP
    candidates = np.unique(np.concatenate([[-np.inf], in_scores]))
    allowed = [t for t in candidates if rates(t, in_scores, in_right, oos)[0] >= floor]
    return oos_metrics(float(max(allowed)), *test)


def read_at_both(val: tuple, test: tuple) -> dict:
    """Test's AUROC, in-scope accuracy and OOS recall at Larson's threshold and at the one-point operating point,
    both chosen on val."""
    return {"larson": oos_metrics(choose_threshold(*val), *test), "one point": at_most_one_point(val, test)}
