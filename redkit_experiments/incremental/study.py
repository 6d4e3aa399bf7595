"""`redkit study incremental`: domains that arrive one at a time, every method in the same run, on the same
backbone, data and steps; after every step each method is scored on the test queries of every step so far.

    data ─► stream (protocol.py: steps of classes, in an order) ─► the pretrained backbone's features and
    frozen-layer states, computed once and cached (<out>/cache) ─► per method: step 0, 1, ... (learn, then
    score) ─► metrics.py ─► <out>/results.json, <out>/report.md with its plot

One method at a time, through every step: a method that finished is read back from <out>/methods/NAME.json
when the study is run again, so an interrupted study resumes with the method it was training. After the last
step, out-of-scope queries (where the data has them) are scored by Larson et al.'s protocol on each method's
maximum softmax probability, the threshold chosen on every step's val with oos_val (evaluation only, the same
data for every method).
"""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from redkit.atomic import write_json
from redkit.backbone import Backbone, BackboneConfig
from redkit.backbone.locate import default_backbone_path
from redkit.backbone.model import token_lengths
from redkit.device import resolve_device
from redkit.errors import RedkitError
from redkit.features import PrefixStates, cached_features
from redkit.fitting.recipe import TUNING, covering_length
from redkit.incremental.gaussian import SHRINKAGE
from redkit.incremental.projection import WIDTH, ProjectionConfig, RandomProjection
from redkit.jsonfile import read_json
from redkit.oos.threshold import choose_threshold, oos_metrics
from redkit.provenance import provenance
from redkit.train.loop import TrainConfig
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.metrics import continual_metrics
from redkit_experiments.incremental.protocol import build_stream, read_data


@dataclass
class IncrementalConfig:
    data_dir: str = "data/clinc150"
    protocol: str = "domains"  # domains | classes (protocol.py)
    order: int = 0  # the steps' order: shuffled with this seed
    classes_per_task: int = 10  # classes protocol
    methods: tuple[str, ...] = ()  # () = every registered method
    seed: int = 0
    trainable_layers: int = 2  # the top layers the fine-tuning strategies tune (the frozen ones run once)
    epochs_per_step: int = 3  # every fine-tuning strategy's budget per step
    joint_steps: str = "last"  # when joint is retrained: last | all | 1,5,10 (steps counted from 1)
    ewc_lambda: float = 1e5  # the penalty of an unconstrained step (Σ F Δθ² ≈ 9e-6 on CLINC150) near the CE
    shrinkage: float = SHRINKAGE  # the Gaussian router's and method's λ
    projection_width: int = WIDTH  # M of the random features φ(h) they read
    device: str = "cpu"
    max_length: int | None = None  # tokens; None: the fewest covering 99 % of the training texts
    recipe: dict = field(default_factory=lambda: dict(TUNING))  # the fit recipe: lr, schedule, batch, smoothing

    def step_training(self) -> TrainConfig:
        """A continual strategy's training of one step: the recipe, a fixed number of epochs, the last kept."""
        return TrainConfig(**(self.recipe | {"max_epochs": self.epochs_per_step, "select_by": "last"}))

    def joint_training(self) -> TrainConfig:
        """joint's: the recipe as `redkit fit` runs it (its epochs, the best by val accuracy)."""
        return TrainConfig(**self.recipe)

    def joint_steps_of(self, steps: int) -> set[int]:
        if self.joint_steps == "last":
            return {steps - 1}
        if self.joint_steps == "all":
            return set(range(steps))
        try:
            chosen = {int(s) - 1 for s in self.joint_steps.split(",")}
        except ValueError:
            raise RedkitError(
                f"--joint-steps {self.joint_steps!r}: last, all, or step numbers such as 1,5,10"
            ) from None
        if not chosen <= set(range(steps)):
            raise RedkitError(f"--joint-steps {self.joint_steps}: the steps are 1..{steps}")
        return chosen


class StudyContext:
    """What every method reads: the stream, the pretrained backbone's pooled features and frozen-layer states
    of every split (computed once, cached under <out>/cache), the random features' map, the settings."""

    def __init__(self, config: IncrementalConfig, out: Path):
        self.config, self.out = config, Path(out)
        self.stream = build_stream(
            read_data(Path(config.data_dir)), config.protocol, config.order, config.classes_per_task
        )
        config.joint_steps_of(len(self.stream.steps))  # a bad --joint-steps fails before anything is encoded
        self.device = resolve_device(config.device, "--device")
        path = default_backbone_path()
        if config.max_length is None:
            config.max_length = covering_length(token_lengths(path, self.stream.texts["train"]), 512)
        self.backbone_config = BackboneConfig(trainable_layers=config.trainable_layers, max_length=config.max_length)
        backbone = self.pretrained_backbone().eval()
        cache = self.out / "cache"
        self.features = {
            split: cached_features(cache, backbone, texts, split) for split, texts in self.stream.texts.items()
        }
        self.prefix = {
            split: PrefixStates.build(cache, backbone, texts, split) for split, texts in self.stream.texts.items()
        }
        self.dim = backbone.hidden_size
        self.projection = RandomProjection(ProjectionConfig(self.dim, config.projection_width))

    def pretrained_backbone(self) -> Backbone:
        return Backbone(self.backbone_config).to(self.device)


def score(method, context: StudyContext, t: int) -> dict:
    """After step t: accuracy on every step's test queries so far, together and step by step."""
    stream = context.stream
    step_of = stream.step_of_class()
    rows = stream.rows("test", range(t + 1))
    scores = method.scores("test", rows).float()
    scores[:, step_of > t] = float("-inf")  # no class that has not arrived
    label = stream.label_of_class()  # scored as labels: a label two domains share is right from either
    right = label[scores.argmax(dim=-1)] == label[stream.class_of["test"][rows]]
    step = step_of[stream.class_of["test"][rows]]
    return {
        "seen_accuracy": float(right.float().mean()),
        # None for a step with no test query (SGD's dev split lacks some services): no accuracy to report
        "accuracy_by_step": [
            float(right[step == j].float().mean()) if (step == j).any() else None for j in range(t + 1)
        ],
    }


def run_method(name: str, context: StudyContext) -> dict:
    """One method through every step: what it learned in how long, its accuracies, what it keeps."""
    method = METHODS[name](context)
    steps = context.stream.steps
    per_step = []
    for t in tqdm(range(len(steps)), desc=name, unit="step", leave=False, dynamic_ncols=True):
        start = time.perf_counter()
        method.learn(t)
        learned = time.perf_counter() - start
        trained = getattr(method, "trained_at", t) == t  # joint trains only at its steps
        row = {"step": t + 1, "domain": steps[t].name, "learn_seconds": learned}
        if trained:
            start = time.perf_counter()
            row |= score(method, context, t) | {"eval_seconds": time.perf_counter() - start}
        row["kept"] = method.kept().as_dict()
        per_step.append(row)
    result = {"keeps": method.keeps, "per_step": per_step, "seconds": sum(r["learn_seconds"] for r in per_step)}
    scored = [r for r in per_step if "seen_accuracy" in r]
    if len(scored) == len(steps):
        result |= continual_metrics([r["accuracy_by_step"] for r in scored], [r["seen_accuracy"] for r in scored])
    elif scored:  # joint at some steps only: its last accuracy is the upper bound
        result["final_accuracy"] = scored[-1]["seen_accuracy"] if scored[-1]["step"] == len(steps) else None
    last = per_step[-1]["kept"]  # examples kept, or their features: either way that many earlier examples
    result |= {"stored_examples": last["examples"] + last["features"], "stored_bytes": last["bytes"]}
    if "oos_val" in context.stream.texts and getattr(method, "trained_at", len(steps) - 1) == len(steps) - 1:
        result["oos"] = out_of_scope(method, context)
    return result


def out_of_scope(method, context: StudyContext) -> dict:
    """Larson et al.'s protocol on the maximum softmax probability over the classes seen (all of them, now)."""
    stream = context.stream
    all_steps = range(len(stream.steps))

    def msp(split: str, rows: torch.Tensor) -> np.ndarray:
        return F.softmax(method.scores(split, rows).float(), dim=-1).max(dim=-1).values.numpy()

    in_val, in_test = stream.rows("val", all_steps), stream.rows("test", all_steps)
    val_scores, test_scores = (method.scores(s, r).float() for s, r in (("val", in_val), ("test", in_test)))
    label = stream.label_of_class()
    val_right = (label[val_scores.argmax(-1)] == label[stream.class_of["val"][in_val]]).numpy()
    test_right = (label[test_scores.argmax(-1)] == label[stream.class_of["test"][in_test]]).numpy()
    oos_val = msp("oos_val", torch.arange(len(stream.texts["oos_val"])))
    oos_test = msp("oos_test", torch.arange(len(stream.texts["oos_test"])))
    val_msp = F.softmax(val_scores, dim=-1).max(dim=-1).values.numpy()
    test_msp = F.softmax(test_scores, dim=-1).max(dim=-1).values.numpy()
    threshold = choose_threshold(val_msp, val_right, oos_val)
    return oos_metrics(threshold, test_msp, test_right, oos_test)


def run_incremental_study(config: IncrementalConfig, out: Path, print_fn=print) -> dict:
    out = Path(out)
    names = list(config.methods) or METHODS.names()
    for name in names:
        METHODS[name]  # unknown names fail (did you mean) before any work
    saved = out / "config.json"
    if saved.is_file():
        previous = read_json(saved, "a study config")
        if config.max_length is None:  # settled from the data when the study began
            previous["max_length"] = None
        if previous != json_ready(asdict(config)):
            raise RedkitError(f"{out} holds a study with other settings; use another --out or delete it")
    start = time.perf_counter()
    context = StudyContext(config, out)
    write_json(saved, json_ready(asdict(config)))
    prepared = time.perf_counter() - start
    methods = {}
    for name in names:
        path = out / "methods" / f"{name}.json"
        if path.is_file():
            methods[name] = read_json(path, "a finished method's results")
            continue
        methods[name] = run_method(name, context)
        write_json(path, methods[name])
        print_fn(method_line(name, methods[name]))
    results = {
        "protocol": config.protocol,
        "order": config.order,
        "steps": [step.name for step in context.stream.steps],
        "classes": len(context.stream.classes),
        "config": json_ready(asdict(config)),
        "prepare_seconds": prepared,
        "methods": methods,
        "provenance": provenance(),
    }
    write_json(out / "results.json", results)
    from redkit_experiments.incremental.report import write_report

    print_fn(write_report(out, results))
    return results


def json_ready(value):
    """As JSON reads it back (tuples as lists): what config.json is compared with."""
    return json.loads(json.dumps(value))


def method_line(name: str, result: dict) -> str:
    final = result.get("final_accuracy")
    return (
        f"[{name}] final {final:.4f}" if final is not None else f"[{name}] final -"
    ) + f", kept {result['stored_examples']:,} examples / {result['stored_bytes']:,} bytes, {result['seconds']:.0f} s"
