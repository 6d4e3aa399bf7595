"""A run directory and everything a stage needs from it.

    <run>/config.json      the resolved RunConfig (a rerun with other settings is refused)
    <run>/config.yaml      the same, as YAML (for reading; config.json is what the run trusts)
    <run>/data/            train/val/test/test_heldout_templates JSONL + splits.json + base_subset.json
                           (+ base_val_subset.json when stage base validates on a sample)
    <run>/cache/           frozen-prefix states and pooled features (safe to delete)
    <run>/modules/         one directory per trained module (config.json + model.safetensors)
    <run>/log.jsonl        one line per epoch and per stage
    <run>/results.json     metrics, config, seed, git commit, versions, wall time per stage
    <run>/report.md        the tables, with figures in <run>/figures/

A bundle (redkit/bundle: a run's modules + manifest.json) opens as a run too, after its manifest is
verified, and read-only: features of evaluated files are cached in a temporary directory, the log
and timings stay in memory, and whatever would train or write data is refused with one line.
"""

import json
import random
import shutil
import tempfile
import time
import weakref
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from functools import cached_property
from pathlib import Path

import torch

from redkit.atomic import write_json, write_yaml
from redkit.backbone import Backbone, BackboneConfig
from redkit.bundle.manifest import is_bundle, verify_bundle
from redkit.config_types import check_config_types
from redkit.data.groups import structure_groups
from redkit.data.generate import HELDOUT, SPLITS, DataConfig, generate, write_dataset
from redkit.data.records import Example, read_jsonl
from redkit.device import resolve_device
from redkit.errors import RedkitError
from redkit.features import cached_features, text_hash
from redkit.jsonfile import read_json
from redkit.modules.store import load_state, module_exists
from redkit.open_run import RUN_KINDS
from redkit.provenance import provenance
from redkit.space import ANSWER_RANGES, LabelSpace
from redkit.train.loop import TrainConfig

# Learning rates and epoch caps per stage, on top of TrainConfig's defaults (lr 1e-4, batch 16,
# virtual batch 64, patience 3, max 60 epochs). Chosen so that `make demo` fits in 10 minutes on a
# 2-core CPU: stage base fine-tunes two pretrained layers (small steps) under a fresh classifier
# (larger steps); the other stages train small modules from scratch on cached features, where lr
# 1e-4 would need far more than 60 epochs. A micro-batch of 64 with a virtual batch of 64 computes
# the same gradient as the paper's 16 x 4 accumulation, in a quarter of the Python calls.
DEFAULT_STAGE_OVERRIDES = {
    "base": {"lr": 4e-4, "head_lr": 4e-3, "max_epochs": 15, "batch_size": 64},
    "joint": {"lr": 4e-4, "head_lr": 4e-3, "max_epochs": 15, "batch_size": 64},  # stage base's recipe on all of train
    "experts": {"lr": 1e-3, "batch_size": 64},
    "heads": {"lr": 1e-3, "batch_size": 64},
    "router": {"lr": 1e-3, "batch_size": 64},
    "gate": {"lr": 1e-3, "batch_size": 64},
}


@dataclass
class StagedConfig:
    """What every staged run has: a seed, a device, expert width and per-stage training settings."""

    seed: int = 0
    expert_rank: int = 0  # r of the residual experts; 0 = d // 4
    device: str = "cpu"
    router: str = "dense"  # a ROUTERS name: the router and the gate of stages router / gate (dense: softmax MLP)
    router_options: dict = field(default_factory=dict)  # the router's own settings (dense: hidden, temperature; labels: source)
    # What RED's router is trained on, experts and C frozen (ROUTER_LOSSES): the domain label (the paper's),
    # the label loss of the composition it routes, or both summed.
    router_loss: str = "domain"
    references: tuple[str, ...] = ()  # REFERENCES names trained and scored beside the compositions (joint, linear_probe)
    train: TrainConfig = field(default_factory=TrainConfig)
    stage_overrides: dict[str, dict] = field(default_factory=lambda: json.loads(json.dumps(DEFAULT_STAGE_OVERRIDES)))

    def cap_epochs(self, max_epochs: int | None, stages: tuple[str, ...] | None = None) -> None:
        """Cap the epochs of `stages` (default every one, references included: quick runs); None
        leaves each stage's own cap."""
        if max_epochs is not None:
            for stage in stages or ("base", "experts", "heads", "router", "gate", "joint"):
                self.stage_overrides.setdefault(stage, {})["max_epochs"] = max_epochs

    def train_config(self, stage: str) -> TrainConfig:
        return TrainConfig(**(asdict(self.train) | self.stage_overrides.get(stage, {})))

    @classmethod
    def from_dict(cls, raw: dict) -> "StagedConfig":
        """The inverse of asdict: nested dataclasses rebuilt, JSON lists back to tuples. Settings
        this class lacks are refused: they mean another benchmark's run (a digits run opened as a
        Task 1 run would otherwise silently get Task 1's defaults)."""
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"settings {', '.join(unknown)} are not {cls.__name__}'s; is it another benchmark's run?")
        kwargs = {}
        for f in fields(cls):
            if f.name in raw:
                value = raw[f.name]
                if hasattr(f.type, "from_dict"):  # a config with configs inside (the steps run's decomposer)
                    value = f.type.from_dict(value)
                elif is_dataclass(f.type):
                    value = f.type(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in value.items()})
                kwargs[f.name] = value
        return cls(**kwargs)


@dataclass
class RunConfig(StagedConfig):
    task: str = "task1"
    data: DataConfig = field(default_factory=DataConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    base_fraction: float = 0.1  # of train, label-balanced, for stage base (the paper's weak global head)
    base_val_examples: int | None = None  # stage base's per-epoch validation: all of val, or this many (label-balanced)
    experts: int | None = None  # None: one expert per answer range R1..R5; K: K equal-width parts of the answers


def _first_difference(a: dict, b: dict, prefix: str = "") -> str | None:
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            found = _first_difference(x, y, f"{prefix}{key}.")
            if found:
                return found
        elif x != y and not (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and list(x) == list(y)):
            return f"{prefix}{key}: {x!r} in the run, {y!r} asked for"
    return None


@RUN_KINDS.register("task2")
@RUN_KINDS.register("task1")
class Run:
    """A text-task run. Stages on features need only what `StageRun` (redkit/train/stage_run.py)
    lists, which a Run provides; other benchmarks (digits) subclass it and replace where features
    come from. Each kind of run registers itself in RUN_KINDS under the task its config records."""

    config_class: type[StagedConfig] = RunConfig
    # Features of texts whose frozen-prefix states stage base cached run through the top layers only
    # (a fit run; the paper's benchmarks encode every text whole, as their published numbers did).
    reuse_prefix: bool = False
    monitor = None  # a callable(stage, step, module) that watches the stages on features train (routing analysis)

    def __init__(self, directory: str | Path, config: StagedConfig | None = None):
        """Open (or create) a run. A new config must match the one the run was made with."""
        self.dir = Path(directory)
        # A bundle's files are checked before anything of it is read (its manifest when it is one).
        self.bundle: dict | None = verify_bundle(self.dir) if is_bundle(self.dir) else None
        if self.bundle is not None and config is not None:
            self.refuse_in_bundle("training into it")
        saved = self.dir / "config.json"
        if saved.is_file():
            raw = read_json(saved, "a redkit run config")
            try:
                existing = self.config_class.from_dict(raw)
            except (TypeError, ValueError, AttributeError) as err:  # not an object, unknown or ill-typed settings
                raise RedkitError(f"{saved}: not a redkit run config ({str(err).splitlines()[0][:200]})") from None
            check_config_types(existing, str(saved))
            if config is not None:
                diff = _first_difference(asdict(existing), json.loads(json.dumps(asdict(config))))
                if diff:
                    raise RedkitError(f"{self.dir} was made with other settings ({diff}); use another --out or delete it")
            config = existing
        elif config is None:
            raise RedkitError(f"{self.dir}: not a redkit run (no config.json)")
        else:
            write_json(saved, asdict(config))
            write_yaml(self.dir / "config.yaml", asdict(config))
        self.config = config
        self.device = resolve_device(config.device, f"{saved}: field 'device'")
        self.timings: dict[str, float] = self._read_timings()

    # ---- paths, logging, timing ----------------------------------------------------------

    def module_dir(self, *parts: str) -> Path:
        return self.dir.joinpath("modules", *parts)

    def refuse_in_bundle(self, what: str) -> None:
        """Nothing is ever written into a bundle, and it has no data: one line saying so."""
        if self.bundle is not None:
            raise RedkitError(f"{self.dir} is a read-only bundle (modules only, no data): {what} needs "
                              f"the run it was exported from ({self.bundle.get('source', {}).get('run')})")

    @cached_property
    def cache_dir(self) -> Path:
        """<run>/cache; a bundle's is a temporary directory removed with the run object, so that
        evaluating a file with a bundle never writes into it."""
        if self.bundle is None:
            return self.dir / "cache"
        scratch = Path(tempfile.mkdtemp(prefix="redkit-bundle-cache-"))
        weakref.finalize(self, shutil.rmtree, scratch, True)
        return scratch

    def log(self, row: dict) -> None:
        if self.bundle is not None:  # a bundle stays as exported
            return
        with (self.dir / "log.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"time": time.time()} | row) + "\n")

    def _read_timings(self) -> dict[str, float]:
        path = self.dir / "timings.json"
        return read_json(path, "a timings file") if path.is_file() else {}

    def add_time(self, stage: str, seconds: float) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds
        if self.bundle is None:  # a bundle's timings stay in memory
            write_json(self.dir / "timings.json", self.timings)

    def record(self, results: dict, wall_start: float) -> dict:
        """`results` with where they came from and the wall time of every stage and of this call
        (since `wall_start`, a perf_counter reading), written to results.json: every benchmark's last step."""
        self.refuse_in_bundle("writing results.json")
        results = results | {"provenance": provenance(), "wall_seconds_per_stage": dict(self.timings),
                             "wall_seconds_this_call": time.perf_counter() - wall_start}
        write_json(self.dir / "results.json", results)
        return results

    # ---- data ------------------------------------------------------------------------------

    def prepare_data(self) -> dict:
        """Write the task's data splits once; reruns reuse them."""
        self.refuse_in_bundle("making data splits")
        if (self.dir / "data" / "splits.json").is_file():
            return json.loads((self.dir / "data" / "splits.json").read_text())
        datasets = generate(self.config.data)
        return write_dataset(self.dir / "data", datasets, self.config.data)

    oos_texts: dict[str, list[str]] = {}  # out-of-scope texts by split (oos_val, oos_test): a fit run's, where given

    @cached_property
    def splits(self) -> dict[str, list[Example]]:
        self.refuse_in_bundle("its data splits")
        return {name: read_jsonl(self.dir / "data" / f"{name}.jsonl", answers=self.space.value_range) for name in (*SPLITS, HELDOUT)}

    def base_subset(self) -> list[int]:
        """Indices into train of stage base's label-balanced `base_fraction`, fixed once per run."""
        size = round(len(self.splits["train"]) * self.config.base_fraction)
        return self._balanced_subset("train", size, "base_subset.json")

    def base_val_subset(self) -> list[int]:
        """Indices into val that stage base scores after every epoch: all of it, or a label-balanced
        `base_val_examples` of it (that loss only decides when to stop and which epoch to keep)."""
        size = self.config.base_val_examples
        if size is None or size >= len(self.splits["val"]):
            return list(range(len(self.splits["val"])))
        return self._balanced_subset("val", size, "base_val_subset.json")

    def _balanced_subset(self, split: str, size: int, filename: str) -> list[int]:
        """`size // num_domains` examples of each domain of `split`, drawn with the run's seed and
        written to data/`filename`, so that a resumed or repeated stage uses the same ones."""
        path = self.dir / "data" / filename
        if path.is_file():
            return json.loads(path.read_text())
        examples = self.splits[split]
        pools = [[i for i, ex in enumerate(examples) if self.domain_label(ex) == label] for label in range(self.space.num_domains)]
        rng = random.Random(self.config.seed)
        chosen = []
        for label, (pool, count) in enumerate(zip(pools, self.subset_sizes(size, pools))):
            if len(pool) < count:
                raise RedkitError(f"{split} has {len(pool)} examples of domain {self.space.domains[label]}, "
                                  f"fewer than the {count} stage base needs")
            chosen += rng.sample(pool, count)
        chosen.sort()
        write_json(path, chosen)
        return chosen

    def subset_sizes(self, size: int, pools: list[list[int]]) -> list[int]:
        """How many of a `size`-example subset each domain gives (its pool: its examples): an equal
        share each, as the paper's label-balanced 10%."""
        return [size // len(pools)] * len(pools)

    # ---- backbone and features ---------------------------------------------------------------

    @cached_property
    def backbone(self) -> Backbone:
        """The backbone, with its tuned top layers once stage base has produced them."""
        backbone = Backbone(self.config.backbone)
        top = self.module_dir("backbone_top")
        if module_exists(top):
            state, meta = load_state(top)
            if meta.config.get("source_fingerprint") != backbone.source_fingerprint:
                raise RedkitError(f"{top}: tuned for backbone {meta.config.get('source_fingerprint')}, "
                                  f"but --backbone {backbone.path} is {backbone.source_fingerprint}")
            try:
                backbone.load_top_state_dict(state)
            except RuntimeError as err:  # a hand-edited or foreign file: missing or misshapen tensors
                raise RedkitError(f"{top}: weights do not fit this backbone's top layers ({str(err).splitlines()[0]})") from None
        return backbone.to(self.device)

    @cached_property
    def fingerprint(self) -> str:
        """Of the features modules are trained on: the tuned backbone's."""
        return self.backbone.fingerprint()

    @property
    def feature_dim(self) -> int:
        return self.backbone.hidden_size

    @cached_property
    def data_hash(self) -> str:
        return text_hash([ex.question for ex in self.splits["train"]])

    def features(self, name: str, examples: list[Example]) -> torch.Tensor:
        """(N, d) pooled features of `examples` with the tuned backbone (cached)."""
        return self.text_features(name, [ex.question for ex in examples])

    def text_features(self, name: str, texts: list[str]) -> torch.Tensor:
        """(N, d) pooled features of bare texts (out-of-scope queries have no label) with the tuned backbone (cached)."""
        if not module_exists(self.module_dir("backbone_top")):
            raise RedkitError(f"{self.module_dir('backbone_top')}: missing; stage base has not run yet, so there is no tuned backbone")
        return cached_features(self.cache_dir, self.backbone, texts, name, reuse_prefix=self.reuse_prefix)

    @cached_property
    def space(self) -> LabelSpace:
        """99 answers; one expert per range R1..R5, or per equal-width part with `experts`."""
        return ANSWER_RANGES.in_equal_parts(self.config.experts) if self.config.experts else ANSWER_RANGES

    def domain_label(self, example: Example) -> int:
        """Which expert's domain an example belongs to: its answer range, or its part with `experts`."""
        if self.config.experts:
            return self.space.domain_of_class(self.space.class_of(example.answer))
        return example.label

    def split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h (N, d), answer classes (N,), domain labels (N,)) of a split."""
        examples = self.splits[name]
        return self.features(name, examples), self.classes(examples), torch.tensor([self.domain_label(ex) for ex in examples])

    def classes(self, examples: list[Example]) -> torch.Tensor:
        """(N,) answer classes; an answer this run has no class for is an error naming its record."""
        return torch.tensor([self.space.class_of(ex.answer, f"record {ex.id} ({ex.question!r})") for ex in examples])

    # ---- evaluation: what the pipeline scores and how (a fit run replaces these) ------------------

    evaluation_splits: tuple[str, ...] = ("test", HELDOUT, "val")

    def read_file(self, path: Path) -> list[Example]:
        """The records of a file to evaluate on."""
        return read_jsonl(path)

    def groups(self, examples: list[Example]) -> dict[str, list[str]]:
        """Per-example keys the accuracy is broken down by."""
        return structure_groups(examples)

    def metrics(self, pred, true) -> dict:
        """Metrics of predicted vs true values (N,) (numpy)."""
        from redkit.metrics import prediction_metrics  # scikit-learn: imported when a run is scored, not opened

        return prediction_metrics(pred, true)

    def write_report(self, results: dict) -> str:
        from redkit.report import write_report

        return write_report(self.dir, results)

