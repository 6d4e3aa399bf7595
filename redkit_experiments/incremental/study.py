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
from redkit.device import resolve_device
from redkit.errors import RedkitError
from redkit.features import PrefixStates, cached_features
from redkit.fitting.recipe import TUNING
from redkit.incremental.gaussian import SHRINKAGE
from redkit.incremental.projection import WIDTH, ProjectionConfig, RandomProjection
from redkit.jsonfile import read_json
from redkit.oos.threshold import choose_threshold, oos_metrics
from redkit.provenance import git_commit, provenance
from redkit.train.loop import TrainConfig
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.hyperparameters import tuned_hyperparameters
from redkit_experiments.incremental.methods import METHODS, Setting
from redkit_experiments.incremental.metrics import continual_metrics
from redkit_experiments.incremental.protocol import build_stream, read_data
from redkit_experiments.incremental.source import method_source


@dataclass
class IncrementalConfig:
    data_dir: str = "data/clinc150"
    protocol: str = "domains"  # domains | classes (protocol.py)
    order: int = 0  # the steps' order: shuffled with this seed
    classes_per_task: int = 10  # classes protocol
    methods: tuple[str, ...] = ()  # () = every registered method
    seed: int = 0
    trainable_layers: int = 2  # the top layers the fine-tuning strategies tune (the frozen ones run once)
    epochs_per_step: int | None = None  # None: hyperparameters' step epochs (early-stopped where patience > 0)
    joint_steps: str = "last"  # when joint is retrained: last | all | 1,5,10 (steps counted from 1)
    # the fine-tuning strategies' (hyperparameters.py: their papers' values, or what the tuning stream chose)
    hyperparameters: dict = field(default_factory=tuned_hyperparameters)
    shrinkage: float = SHRINKAGE  # the Gaussian router's and method's λ
    projection_width: int = WIDTH  # M of the random features φ(h) they read
    device: str = "cpu"
    # the tuning stream (tuning.py): only the first N steps (0: all), scored on their val, never on test
    first_steps: int = 0
    scored_on: str = "test"
    # tokens: a constant of the recipe, not a statistic of the data (every step's texts are not there to measure
    # before step 0); it holds every CLINC150 query whole (the longest: 33) and 99.7 % of BANKING77's
    max_length: int = 64
    recipe: dict = field(default_factory=lambda: dict(TUNING))  # the fit recipe: lr, schedule, batch, smoothing

    def hyper(self, group: str, key: str, method: str) -> float:
        """A strategy's hyperparameter: `method`'s own (what the tuning stream chose for it), else its group's
        (hyperparameters.py: "step" for every strategy's training, "derpp" for DER++'s losses, ...)."""
        own = self.hyperparameters.get(method, {})
        return own[key] if key in own else self.hyperparameters[group][key]

    def step_training(self, method: str) -> TrainConfig:
        """A continual strategy's training of one step: the recipe at the method's rate, at most its epochs;
        with patience, early-stopped on the step's own val accuracy (the only val a continual learner has),
        else the last epoch kept."""
        epochs = self.epochs_per_step or int(self.hyper("step", "epochs", method))
        patience = int(self.hyper("step", "patience", method))
        return TrainConfig(
            **(
                self.recipe
                | {
                    "lr": self.hyper("step", "lr", method),
                    "max_epochs": epochs,
                    "patience": patience or epochs,
                    "select_by": "accuracy" if patience else "last",
                }
            )
        )

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
    """The study's own: the stream, and the pretrained backbone's pooled features and frozen-layer states of every
    split (computed once, cached under <out>/cache). Methods never see it: they get the Setting, then step t's
    data (`step_data`) while they learn step t, and queries without their classes (`queries`) to score."""

    def __init__(self, config: IncrementalConfig, out: Path):
        self.config, self.out = config, Path(out)
        data, class_order = read_data(Path(config.data_dir))
        self.stream = build_stream(data, config.protocol, config.order, config.classes_per_task, class_order)
        if config.first_steps:
            self.stream.steps = self.stream.steps[: config.first_steps]
        config.joint_steps_of(len(self.stream.steps))  # a bad --joint-steps fails before anything is encoded
        backbone_config = BackboneConfig(trainable_layers=config.trainable_layers, max_length=config.max_length)
        device = resolve_device(config.device, "--device")
        backbone = Backbone(backbone_config).to(device).eval()
        cache = self.out / "cache"
        self.features = {
            split: cached_features(cache, backbone, texts, split) for split, texts in self.stream.texts.items()
        }
        self.prefix = {
            split: PrefixStates.build(cache, backbone, texts, split) for split, texts in self.stream.texts.items()
        }
        projection = RandomProjection(ProjectionConfig(backbone.hidden_size, config.projection_width))
        self.setting = Setting(
            config,
            self.stream.classes,
            len(self.stream.steps),
            backbone.hidden_size,
            device,
            projection,
            backbone_config,
        )

    def examples(self, split: str, rows: torch.Tensor, with_classes: bool) -> Examples:
        """Copies of `split`'s rows `rows` (N,)."""
        p = self.prefix[split]
        prefix = PrefixStates(p.input_ids[rows], p.attention_mask[rows], None if p.states is None else p.states[rows])
        classes = self.stream.class_of[split][rows] if with_classes and split in self.stream.class_of else None
        return Examples(
            self.features[split][rows], prefix, tuple(self.stream.texts[split][i] for i in rows.tolist()), classes
        )

    def step_data(self, t: int) -> StepData:
        """Step t's train and val examples with their classes: all a method may read while it learns step t."""
        step = self.stream.steps[t]
        train, val = (
            self.examples(split, self.stream.rows(split, [t]), with_classes=True) for split in ("train", "val")
        )
        return StepData(t, step.name, tuple(sorted(step.classes)), train, val)

    def queries(self, split: str, rows: torch.Tensor | None = None) -> Examples:
        """`split`'s rows (default: all) to score, without their classes."""
        rows = torch.arange(len(self.stream.texts[split])) if rows is None else rows
        return self.examples(split, rows, with_classes=False)


def score(method, context: StudyContext, t: int) -> dict:
    """After step t: accuracy on every step's test queries so far (a tuning stream's: val), together and step by
    step."""
    stream, split = context.stream, context.config.scored_on
    step_of = stream.step_of_class()
    rows = stream.rows(split, range(t + 1))
    scores = method.scores(context.queries(split, rows)).float()
    scores[:, (step_of > t) | (step_of < 0)] = float("-inf")  # no class that has not arrived (or never will)
    label = stream.label_of_class()  # scored as labels: a label two domains share is right from either
    right = label[scores.argmax(dim=-1)] == label[stream.class_of[split][rows]]
    step = step_of[stream.class_of[split][rows]]
    return {
        "seen_accuracy": float(right.float().mean()),
        # None for a step with no test query (SGD's dev split lacks some services): no accuracy to report
        "accuracy_by_step": [
            float(right[step == j].float().mean()) if (step == j).any() else None for j in range(t + 1)
        ],
    }


def run_method(name: str, context: StudyContext) -> dict:
    """One method through every step: what it learned in how long, its accuracies, what it keeps."""
    method = METHODS[name](context.setting)
    steps = context.stream.steps
    per_step = []
    for t in tqdm(range(len(steps)), desc=name, unit="step", leave=False, dynamic_ncols=True):
        step = context.step_data(t)
        start = time.perf_counter()
        method.learn(step)
        del step  # what the method kept of it, it copied
        learned = time.perf_counter() - start
        trained = getattr(method, "trained_at", t) == t  # joint trains only at its steps
        row = {"step": t + 1, "domain": steps[t].name, "learn_seconds": learned}
        if trained:
            start = time.perf_counter()
            row |= score(method, context, t) | {"eval_seconds": time.perf_counter() - start}
        row["kept"] = method.kept().as_dict()
        per_step.append(row)
    result = {
        "keeps": method.keeps,
        "per_step": per_step,
        "seconds": sum(r["learn_seconds"] for r in per_step),
        "details": method.details(),
    }
    scored = [r for r in per_step if "seen_accuracy" in r]
    if len(scored) == len(steps):
        result |= continual_metrics([r["accuracy_by_step"] for r in scored], [r["seen_accuracy"] for r in scored])
    elif scored:  # joint at some steps only: its last accuracy is the upper bound
        result["final_accuracy"] = scored[-1]["seen_accuracy"] if scored[-1]["step"] == len(steps) else None
    last = per_step[-1]["kept"]  # examples kept, or their features: either way that many earlier examples
    result |= {
        "stored_examples": last["examples"] + last["features"],
        "stored_bytes": last["bytes"],
        "stored_from_data_bytes": last["from_data_bytes"],
    }
    if (
        context.config.scored_on == "test"
        and "oos_val" in context.stream.texts
        and getattr(method, "trained_at", len(steps) - 1) == len(steps) - 1
    ):
        result["oos"] = out_of_scope(method, context)
    return result


def out_of_scope(method, context: StudyContext) -> dict:
    """Larson et al.'s protocol on the maximum softmax probability over the classes seen (all of them, now)."""
    stream = context.stream
    all_steps = range(len(stream.steps))

    def msp(split: str) -> np.ndarray:
        return F.softmax(method.scores(context.queries(split)).float(), dim=-1).max(dim=-1).values.numpy()

    in_val, in_test = stream.rows("val", all_steps), stream.rows("test", all_steps)
    val_scores, test_scores = (
        method.scores(context.queries(s, r)).float() for s, r in (("val", in_val), ("test", in_test))
    )
    label = stream.label_of_class()
    val_right = (label[val_scores.argmax(-1)] == label[stream.class_of["val"][in_val]]).numpy()
    test_right = (label[test_scores.argmax(-1)] == label[stream.class_of["test"][in_test]]).numpy()
    oos_val, oos_test = msp("oos_val"), msp("oos_test")
    val_msp = F.softmax(val_scores, dim=-1).max(dim=-1).values.numpy()
    test_msp = F.softmax(test_scores, dim=-1).max(dim=-1).values.numpy()
    threshold = choose_threshold(val_msp, val_right, oos_val)
    return oos_metrics(threshold, test_msp, test_right, oos_test)


def run_incremental_study(config: IncrementalConfig, out: Path, print_fn=print) -> dict:
    out = Path(out)
    names = [METHODS.canonical(name) for name in config.methods] or METHODS.names()
    for name in names:
        METHODS[name]  # unknown names fail (did you mean) before any work
    saved = out / "config.json"
    settings = json_ready(asdict(config) | {"methods": None})  # which methods run may change between invocations
    if saved.is_file() and read_json(saved, "a study config") | {"methods": None} != settings:
        raise RedkitError(f"{out} holds a study with other settings; use another --out or delete it")
    commit = git_commit()
    start = time.perf_counter()
    context = StudyContext(config, out)
    write_json(saved, json_ready(asdict(config)))
    prepared = time.perf_counter() - start
    methods = {}
    for name in names:
        path = out / "methods" / f"{name}.json"
        code = {"commit": commit, "source": method_source(METHODS[name].__module__)}  # source.py
        if path.is_file():
            methods[name] = finished(path, code, settings)
            continue
        methods[name] = run_method(name, context) | {"code": code, "settings": settings}
        write_json(path, methods[name])
        print_fn(method_line(name, methods[name]))
    results = {
        "protocol": config.protocol,
        "order": config.order,
        "steps": [step.name for step in context.stream.steps],
        "classes": len(context.stream.classes),
        "stream": context.stream.fingerprint(),  # the data, wherever it was read from (merges compare it)
        "config": json_ready(asdict(config)),
        "prepare_seconds": prepared,
        "methods": methods,
        "provenance": provenance(),
    }
    write_json(out / "results.json", results)
    from redkit_experiments.incremental.report import write_report

    print_fn(write_report(out, results))
    return results


def finished(path: Path, code: dict, settings: dict) -> dict:
    """A finished method's results read back: only where the same code and settings produced them."""
    result = read_json(path, "a finished method's results")
    made_by = result.get("code", {})
    if made_by.get("source") != code["source"] or result.get("settings") != settings:
        raise RedkitError(
            f"{path} was made by other code or settings (commit {made_by.get('commit', 'unrecorded')}); "
            "delete it to run that method again, or use another --out"
        )
    return result


def json_ready(value):
    """As JSON reads it back (tuples as lists): what config.json is compared with."""
    return json.loads(json.dumps(value))


def method_line(name: str, result: dict) -> str:
    final = result.get("final_accuracy")
    return (
        f"[{name}] final {final:.4f}" if final is not None else f"[{name}] final -"
    ) + f", kept {result['stored_examples']:,} examples / {result['stored_bytes']:,} bytes, {result['seconds']:.0f} s"
