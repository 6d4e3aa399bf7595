"""Honest non-modular references (docs/guides/design.md, decision 12), each with its own features and training:

    joint         the same trainable top backbone layers and a classifier fine-tuned on 100 % of
                  train, early-stopped on val: the multitask fine-tuning post-hoc composition is
                  measured against (Arrow, PHATGOOSE and FlexOlmo report against it)
    linear_probe  the frozen backbone's pooled features + scikit-learn logistic regression: the cheap
                  reference a practitioner tries first

Each registers a training stage (redkit.train.stages.STAGES) and a `Reference` here: how to get its
class probabilities (N, C) for any texts, so that every split, evaluated file and out-of-scope set
scores it beside the compositions. A run trains the references named in its config's `references`
(a fit run: both by default; Task 1/2 only when asked, since `joint` there costs a full fine-tuning).
"""

# Each reference registers itself (and its training stage) when imported, in this order.
from redkit.references import joint, linear_probe  # noqa: E402,F401
from redkit.references.registry import REFERENCES, Reference  # noqa: F401
