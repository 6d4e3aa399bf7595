"""Out-of-scope queries: Larson et al.'s oos-threshold protocol for any composition.

data.py           an OOS file read and checked (texts; a label that is one of the run's is refused)
owner_density.py  what a replay-free run's owners send for it (their Gaussians of their adapted features) and the
                  scores read from it and from the router's ridge
scores.py         a confidence score per example and composition (pure functions over tensors)
threshold.py      the threshold chosen on validation, then in-scope accuracy, OOS recall and AUROC
evaluate.py       every composition of a run scored, thresholds recorded in <run>/oos.json, the figure
"""
