"""Stage base: the backbone's top-N layers and the shared classifier C, fine-tuned on the domain-balanced base
subset; `tune_top` is its recipe, which the `joint` reference runs on all of train."""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from redkit.features import PrefixStates
from redkit.modules.layers import Classifier
from redkit.modules.store import ModuleMeta, module_exists, save_module
from redkit.train.loop import Checkpoint, fit
from redkit.train.ranks import Ranks
from redkit.train.stages.registry import STAGES, module_meta, timed


@dataclass
class BaseData:
    """What stage base trains and validates on: the base subset's frozen-prefix states (N, T, d)
    and classes (N,), and the distinct validation texts' states (V, T', d), classes and counts (V,)."""

    train_states: PrefixStates
    train_y: torch.Tensor
    val_states: PrefixStates
    val_y: torch.Tensor
    val_w: torch.Tensor


def prepare_base(run, backbone=None, train_indices: list[int] | None = None, tag: str = "base") -> BaseData:
    """Stage base's data (or another tuning's: `train_indices` into train, default the base
    subset), with the frozen prefix run once per distinct text and cached under `tag`."""
    backbone = backbone or run.backbone
    indices = run.base_subset() if train_indices is None else train_indices
    subset = [run.splits["train"][i] for i in indices]
    val_examples = [run.splits["val"][i] for i in run.base_val_subset()]
    train_states = PrefixStates.build(run.cache_dir, backbone, [ex.question for ex in subset], f"{tag}-train")
    # Validation texts repeat a lot: score each distinct text once, weighted by its count.
    distinct: dict[str, list] = {}
    for ex in val_examples:
        distinct.setdefault(ex.question, [run.space.class_of(ex.answer), 0])[1] += 1
    val_texts = list(distinct)
    val_states = PrefixStates.build(run.cache_dir, backbone, val_texts, "base-val")
    return BaseData(
        train_states,
        run.classes(subset),
        val_states,
        torch.tensor([distinct[t][0] for t in val_texts]),
        torch.tensor([distinct[t][1] for t in val_texts], dtype=torch.float),
    )


def tune_top(
    run, backbone, top_dir, clf_dir, stage: str, train_indices: list[int] | None = None, ranks: Ranks = Ranks()
) -> dict:
    """Fine-tune `backbone`'s top-N layers and a fresh classifier over all the run's classes on
    `train_indices` of train (default: the base subset), early-stopped on val (its loss, or its
    accuracy: the stage's `select_by`); save both to `top_dir` / `clf_dir`. Stage base is this on the
    base subset; the `joint` reference on all of train. The recipe is the stage's TrainConfig."""
    if ranks.is_writer:  # rank 0 builds the cache (if the launcher has not) before the others read it
        data = prepare_base(run, backbone, train_indices, stage)
    ranks.barrier()
    if not ranks.is_writer:
        data = prepare_base(run, backbone, train_indices, stage)
    torch.manual_seed(run.config.seed)  # the classifier's init must not depend on what ran before
    classifier = Classifier(Classifier.Config(backbone.hidden_size, run.space.num_classes)).to(run.device)
    # Only these switch to training mode (dropout) and are checkpointed; the prefix stays frozen.
    trainable = nn.ModuleDict({"top": backbone.top_layers, "classifier": classifier})

    train_config = run.config.train_config(stage)

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        with backbone.autocast():
            logits = classifier(backbone(*data.train_states.batch(idx, run.device)))
        return F.cross_entropy(
            logits.float(), data.train_y[idx].to(run.device), label_smoothing=train_config.label_smoothing
        )

    # With length-grouped batches validation goes in length order too (chunks of similar lengths pad
    # less); otherwise in the texts' order, as runs made before the recipe existed scored it.
    val_order = (
        torch.argsort(data.val_states.lengths(), stable=True)
        if train_config.length_grouped
        else torch.arange(len(data.val_y))
    )

    def validate() -> dict[str, float]:
        """The count-weighted mean loss (no smoothing) and accuracy over the distinct validation
        texts; each rank scores every N-th chunk of 512 and the ranks' sums are added."""
        loss, right = 0.0, 0.0
        for first in range(512 * ranks.rank, len(data.val_y), 512 * ranks.world):
            idx = val_order[first : first + 512]
            with backbone.autocast():
                logits = classifier(backbone(*data.val_states.batch(idx, run.device))).float()
            truth, weight = data.val_y[idx].to(run.device), data.val_w[idx]
            loss += (F.cross_entropy(logits, truth, reduction="none").cpu() * weight).sum().item()
            right += ((logits.argmax(dim=-1) == truth).cpu() * weight).sum().item()
        loss, right = ranks.sum([loss, right])
        return {"loss": loss / data.val_w.sum().item(), "accuracy": right / data.val_w.sum().item()}

    result = fit(
        trainable,
        batch_loss,
        len(data.train_y),
        validate,
        train_config,
        seed=run.config.seed,
        checkpoint_dir=clf_dir,
        desc=stage,
        log=run.log,
        head=classifier,
        ranks=ranks,
        lengths=data.train_states.lengths(),
    )
    backbone.eval()
    meta = module_meta(run, classifier, "classifier", None, result, backbone.config.precision)
    meta.backbone_fingerprint = backbone.fingerprint()
    meta.metrics["nproc"] = ranks.world  # how it was trained: N processes draw other dropout masks
    if not ranks.is_writer:
        return {}
    save_module(
        top_dir,
        backbone.top_state_dict(),
        ModuleMeta(
            kind="backbone_top",
            backbone_fingerprint=meta.backbone_fingerprint,
            seed=run.config.seed,
            data_hash=meta.data_hash,
            metrics=meta.metrics,
            config=backbone.top_config(),
        ),
    )
    save_module(clf_dir, classifier.cpu(), meta)
    Checkpoint(clf_dir).remove()
    return {
        "epochs": result.epochs,
        "best_epoch": result.best_epoch,
        "best_val_loss": result.best_val_loss,
        **({"best_val_accuracy": result.best_val_accuracy} if result.best_val_accuracy is not None else {}),
        "examples": len(data.train_y),
    }


@STAGES.register("base")
def stage_base(run, ranks: Ranks = Ranks()) -> dict:
    """Fine-tune the top-N layers and the shared classifier on the label-balanced base subset;
    with `ranks` one of N data-parallel processes (redkit/train/distributed.py)."""
    top_dir, clf_dir = run.module_dir("backbone_top"), run.module_dir("classifier")
    if module_exists(top_dir) and module_exists(clf_dir):
        return {"skipped": "base"}

    def work() -> dict:
        summary = tune_top(run, run.backbone, top_dir, clf_dir, "base", ranks=ranks)
        run.__dict__.pop("fingerprint", None)  # the tuned top changed the features
        return summary

    return timed(run, "base", work) if ranks.is_writer else work()
