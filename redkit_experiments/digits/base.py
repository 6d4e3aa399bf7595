"""Stage base of the digits benchmark: the MLP backbone and the shared classifier C, trained
together on the stratified `base_ratio` of train (the paper's weak global head), with early
stopping on the validation split. Afterwards both are frozen: C is the classifier RED's residual
experts are trained through, and the backbone's outputs are the features of every other stage.

It takes the place of `redkit.train.stages.stage_base` (which fine-tunes a language model's top
layers) and writes the same artifacts the other stages expect: `modules/classifier` with the
backbone's fingerprint, plus `modules/backbone` (kind "mlp_backbone").
"""

from dataclasses import asdict

import torch
from torch import nn
from torch.nn import functional as F

from redkit.modules.layers import Classifier
from redkit.modules.store import ModuleMeta, module_exists, save_module
from redkit.train.loop import Checkpoint, fit
from redkit.train.stages import timed
from redkit_experiments.digits.backbone import MLPBackbone
from redkit_experiments.digits.run import DigitsRun


def stage_base(run: DigitsRun) -> dict:
    backbone_dir, classifier_dir = run.module_dir("backbone"), run.module_dir("classifier")
    if module_exists(backbone_dir) and module_exists(classifier_dir):
        return {"skipped": "base"}

    def work() -> dict:
        x, y = run.splits["train"]
        base = torch.tensor(run.base_subset(), dtype=torch.long)
        xb, yb = x[base].to(run.device), y[base].to(run.device)  # (n, P), (n,)
        vx, vy = (t.to(run.device) for t in run.splits["val"])
        torch.manual_seed(run.config.seed)
        backbone = MLPBackbone(run.backbone_config)
        classifier = Classifier(Classifier.Config(dim=run.feature_dim, num_classes=run.space.num_classes))
        net = nn.Sequential(backbone, classifier).to(run.device)  # x (B, P) -> logits (B, C)
        result = fit(
            net,
            lambda idx: F.cross_entropy(net(xb[idx]), yb[idx]),
            len(xb),
            lambda: F.cross_entropy(net(vx), vy).item(),
            run.config.train_config("base"),
            seed=run.config.seed,
            checkpoint_dir=classifier_dir,
            desc="base",
            log=run.log,
        )
        metrics = {
            "best_val_loss": result.best_val_loss,
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "seconds": result.seconds,
        }

        def meta(kind: str, config: dict) -> ModuleMeta:
            return ModuleMeta(
                kind=kind,
                config=config,
                backbone_fingerprint=backbone.fingerprint(),
                data_hash=run.data_hash,
                seed=run.config.seed,
                metrics=metrics,
            )

        save_module(backbone_dir, backbone.cpu(), meta("mlp_backbone", asdict(backbone.config)))
        save_module(classifier_dir, classifier.cpu(), meta("classifier", vars(classifier.config)))
        Checkpoint(classifier_dir).remove()
        run.forget_backbone()
        return {
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "base_examples": len(base),
        }

    return timed(run, "base", work)
