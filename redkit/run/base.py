"""A run directory and what every kind of run shares; each kind (a run on your labelled text, the
paper's benchmarks) is a subclass that says where its data, classes and features come from.

    <run>/config.json      the resolved config (a rerun with other settings is refused)
    <run>/config.yaml      the same, as YAML (for reading; config.json is what the run trusts)
    <run>/data/            the data splits, as the kind writes them (+ base_subset.json)
    <run>/cache/           frozen-prefix states and pooled features (safe to delete)
    <run>/modules/         one directory per trained module (config.json + model.safetensors)
    <run>/log.jsonl        one line per epoch and per stage
    <run>/timings.json     wall seconds per stage
    <run>/results.json     metrics, config, seed, git commit, versions, wall time per stage
    <run>/report.md        the tables, with figures in <run>/figures/

A bundle (redkit/bundle: a run's modules + manifest.json) opens as a run too, after its manifest is
verified, and read-only: features of evaluated files are cached in a temporary directory, the log
and timings stay in memory, and whatever would train or write data is refused with one line.

The stages on cached features need only what `StageRun` (redkit/train/stage_run.py) lists: `space`,
`split_tensors`, `feature_dim`, `fingerprint`, `data_hash`, `module_dir`, `log`, `add_time`.
"""

import json
import os
import random
import shutil
import tempfile
import time
import weakref
from dataclasses import asdict
from functools import cached_property
from pathlib import Path

import torch

from redkit.atomic import write_json, write_yaml
from redkit.bundle.manifest import is_bundle, verify_bundle
from redkit.config_types import check_config_types
from redkit.device import resolve_device
from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.names import check_name
from redkit.provenance import provenance
from redkit.run.config import StagedConfig, first_difference
from redkit.space import LabelSpace


class Run:
    """A run of some kind: its directory, config, modules, log, timings and results. A kind gives
    `config_class` and the data: `prepare_data`, `splits`, `space`, `domain_label`, `classes`,
    `split_tensors`, and what its evaluation scores (`evaluation_splits`, `read_file`, `groups`,
    `metrics`, `write_report`). Each kind registers itself in RUN_KINDS (redkit/run/kinds.py)."""

    config_class: type[StagedConfig] = StagedConfig
    # Features of texts whose frozen-prefix states stage base cached run through the top layers only
    # (a fit run; the paper's benchmarks encode every text whole, as their published numbers did).
    reuse_prefix: bool = False
    monitor = None  # a callable(stage, step, module) that watches the stages on features train (routing analysis)
    oos_texts: dict[str, list[str]] = {}  # out-of-scope texts by split (oos_val, oos_test), where the kind has any
    evaluation_splits: tuple[str, ...] = ("test", "val")

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
                diff = first_difference(asdict(existing), json.loads(json.dumps(asdict(config))))
                if diff:
                    raise RedkitError(
                        f"{self.dir} was made with other settings ({diff}); use another --out or delete it"
                    )
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
        # Every component one name, whichever file gave it (a config's or an expert's domains): a domain
        # '../../x' would otherwise write or load modules outside the run. The folders' own names are allowed.
        for part in parts:
            check_name(part, "module folder", str(self.dir / "modules"), reserved=False)
        return self.dir.joinpath("modules", *parts)

    def refuse_in_bundle(self, what: str) -> None:
        """Nothing is ever written into a bundle, and it has no data: one line saying so."""
        if self.bundle is not None:
            raise RedkitError(
                f"{self.dir} is a read-only bundle (modules only, no data): {what} needs "
                f"the run it was exported from ({self.bundle.get('source', {}).get('run')})"
            )

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
        with (self.dir / "log.jsonl").open("a+b") as f:
            # A kill mid-write leaves a last line without its newline (readers skip it): cut it first,
            # or this row would join it into one corrupt line in the middle of the log.
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":
                    f.seek(0)
                    f.truncate(f.read().rfind(b"\n") + 1)
            f.write((json.dumps({"time": time.time()} | row) + "\n").encode())

    def _read_timings(self) -> dict[str, float]:
        path = self.dir / "timings.json"
        return read_json(path, "a timings file") if path.is_file() else {}

    def add_time(self, stage: str, seconds: float) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds
        if self.bundle is None:  # a bundle's timings stay in memory
            write_json(self.dir / "timings.json", self.timings)

    def read_results(self) -> dict:
        """<run>/results.json ({} before the run was evaluated), with the compositions' names made
        current: a run written before a rename (global_full -> global_head, ...) reads as a new one."""
        from redkit.compositions import current_names

        path = self.dir / "results.json"
        results = read_json(path, "a run's results") if path.is_file() else {}
        if isinstance(results.get("splits"), dict):
            results["splits"] = {
                split: current_names(table) if isinstance(table, dict) else table
                for split, table in results["splits"].items()
            }
        return results

    def record(self, results: dict, wall_start: float) -> dict:
        """`results` with where they came from and the wall time of every stage and of this call
        (since `wall_start`, a perf_counter reading), written to results.json: every benchmark's last step."""
        self.refuse_in_bundle("writing results.json")
        results = results | {
            "provenance": provenance(),
            "wall_seconds_per_stage": dict(self.timings),
            "wall_seconds_this_call": time.perf_counter() - wall_start,
        }
        write_json(self.dir / "results.json", results)
        return results

    # ---- data: what each kind gives ---------------------------------------------------------------

    def prepare_data(self) -> dict:
        """Write the data splits once; reruns reuse them."""
        raise NotImplementedError

    @cached_property
    def splits(self) -> dict[str, list]:
        raise NotImplementedError

    @cached_property
    def space(self) -> LabelSpace:
        """The classes and the domains that divide the data among the experts."""
        raise NotImplementedError

    def domain_label(self, example) -> int:
        """The index of the domain an example belongs to (-1: none of the run's)."""
        raise NotImplementedError

    def classes(self, examples: list) -> torch.Tensor:
        """(N,) the examples' classes."""
        raise NotImplementedError

    def split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h (N, d), classes (N,), domain labels (N,)) of a split."""
        raise NotImplementedError

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
        pools = [
            [i for i, ex in enumerate(examples) if self.domain_label(ex) == label]
            for label in range(self.space.num_domains)
        ]
        rng = random.Random(self.config.seed)
        chosen = []
        for label, (pool, count) in enumerate(zip(pools, self.subset_sizes(size, pools))):
            if len(pool) < count:
                raise RedkitError(
                    f"{split} has {len(pool)} examples of domain {self.space.domains[label]}, "
                    f"fewer than the {count} stage base needs"
                )
            chosen += rng.sample(pool, count)
        chosen.sort()
        write_json(path, chosen)
        return chosen

    def subset_sizes(self, size: int, pools: list[list[int]]) -> list[int]:
        """How many of a `size`-example subset each domain gives (its pool: its examples): an equal
        share each, as the paper's label-balanced 10%."""
        return [size // len(pools)] * len(pools)

    # ---- evaluation: what the pipeline scores and how ---------------------------------------------

    def read_file(self, path: Path) -> list:
        """The records of a file to evaluate on."""
        raise NotImplementedError

    def groups(self, examples: list) -> dict[str, list[str]]:
        """Per-example keys the accuracy is broken down by."""
        return {}

    def metrics(self, pred, true) -> dict:
        """Metrics of predicted vs true values (N,) (numpy)."""
        from redkit.metrics import label_metrics  # scikit-learn: imported when a run is scored, not opened

        return label_metrics(pred, true)

    def write_report(self, results: dict) -> str:
        raise NotImplementedError

    # ---- how the API answers for this kind (a kind that predicts otherwise replaces these) --------

    def default_compositions(self) -> list[str]:
        """What `evaluate` scores unless told: every composition this run's label space allows."""
        from redkit.compositions import default_compositions

        return default_compositions(self.space)

    def predict_texts(self, texts: list[str], composition: str) -> list | None:
        """Predictions of a kind that answers otherwise than one composition over the features (a
        steps run decomposes and executes); None: the API's own (redkit/api.py)."""
        return None

    def evaluate_file(self, path: Path, names: list[str]) -> dict | None:
        """{composition: metrics} of a kind that evaluates a file otherwise than every composition over
        its features (a steps run decomposes and executes); None: redkit.evaluate.evaluate_file's."""
        return None

    def label_details(self, label) -> dict:
        """What to say of a predicted label beside it (Task 1/2: its answer range)."""
        return {}

    def domain_index(self, name: str) -> int:
        """The index of a domain given by name (`--domain`): one of the run's, or did you mean."""
        from redkit.registry import Registry

        known = Registry("domain")
        for index, domain in enumerate(self.space.domains):
            known.register(domain)(index)
        return known[name]
