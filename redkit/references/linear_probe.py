"""`linear_probe`: scikit-learn logistic regression on the frozen (untuned) backbone's pooled features.

The inverse regularisation strength C is chosen on val accuracy from a small grid, as a
practitioner would. Features are standardised for the solver; the standardisation is folded into
the weights, so the saved module is one linear head (modules/linear_probe, a `head`) over the raw
features, in safetensors like every module, checked against the *untuned* backbone's fingerprint.
"""

from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

from redkit.backbone import Backbone
from redkit.features import cached_features
from redkit.modules.layers import MODULES
from redkit.modules.store import ModuleMeta, load_module, module_exists, save_module
from redkit.references.registry import REFERENCES, Reference
from redkit.train.stages import STAGES, timed

C_GRID = (0.1, 1.0, 10.0)


@lru_cache(maxsize=4)
def frozen_backbone(run) -> Backbone:
    return Backbone(run.config.backbone).to(run.device).eval()


def frozen_features(run, name: str, texts: list[str]) -> torch.Tensor:
    # The frozen backbone's prefix is the tuned one's: texts stage base cached run its untuned top only.
    return cached_features(
        run.cache_dir, frozen_backbone(run), texts, f"frozen-{name}", reuse_prefix=getattr(run, "reuse_prefix", False)
    )


def softmax_rows(coef: np.ndarray, intercept: np.ndarray, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(classes, d) weights and (classes,) biases whose softmax is scikit-learn's predict_proba. With
    two classes LogisticRegression keeps one row w (the log-odds of the second class): the rows
    -w/2 and +w/2 give softmax = sigmoid(w·x + b), as predict_proba does; more classes keep one each."""
    if classes == 2 and coef.shape[0] == 1:
        return np.vstack([-coef / 2, coef / 2]), np.concatenate([-intercept / 2, intercept / 2])
    return coef, intercept


@STAGES.register("linear_probe")
def stage_linear_probe(run) -> dict:
    directory = run.module_dir("linear_probe")
    if module_exists(directory):
        return {"skipped": "linear_probe"}

    def work() -> dict:
        from sklearn.linear_model import LogisticRegression

        train, val = run.splits["train"], run.splits["val"]
        x = frozen_features(run, "train", [ex.question for ex in train]).double().numpy()
        vx = frozen_features(run, "val", [ex.question for ex in val]).double().numpy()
        y, vy = run.classes(train).numpy(), run.classes(val).numpy()
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-8
        best = None
        for c in C_GRID:
            model = LogisticRegression(C=c, max_iter=2000).fit((x - mean) / scale, y)
            accuracy = float((model.predict((vx - mean) / scale) == vy).mean())
            if best is None or accuracy > best[0]:
                best = (accuracy, c, model)
        accuracy, c, model = best
        coef, intercept = softmax_rows(model.coef_, model.intercept_, len(model.classes_))
        # logits = W (x - μ)/σ + b = (W/σ) x + (b - W μ/σ), over the classes seen in train (all of them)
        weight = np.zeros((run.space.num_classes, x.shape[1]))
        bias = np.full(run.space.num_classes, -1e4)
        weight[model.classes_] = coef / scale
        bias[model.classes_] = intercept - (coef / scale) @ mean
        head = MODULES["head"](MODULES["head"].Config(dim=x.shape[1], num_classes=run.space.num_classes))
        head.linear.weight.data = torch.tensor(weight, dtype=torch.float32)
        head.linear.bias.data = torch.tensor(bias, dtype=torch.float32)
        save_module(
            directory,
            head,
            ModuleMeta(
                kind="head",
                config=vars(head.config),
                backbone_fingerprint=frozen_backbone(run).fingerprint(),
                data_hash=run.data_hash,
                seed=run.config.seed,
                metrics={"val_accuracy": accuracy, "C": c, "C_grid": list(C_GRID)},
            ),
        )
        return {"module": str(directory), "C": c, "val_accuracy": accuracy}

    return timed(run, "linear_probe", work)


@torch.no_grad()
def linear_probe_probs(run, name: str, texts: list[str]) -> torch.Tensor:
    backbone = frozen_backbone(run)
    head = load_module(run.module_dir("linear_probe"), backbone.fingerprint(), backbone.hidden_size)[0]
    return F.softmax(head(frozen_features(run, name, texts)), dim=-1)


REFERENCES.register("linear_probe")(Reference(linear_probe_probs, ("linear_probe",)))
