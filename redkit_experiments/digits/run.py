"""A digits run: a Run whose features come from the MLP backbone on images instead of a language
model on text. Everything else (run directory, config matching, module directories, log, timings)
is Run's, and the stages experts / heads / router / gate run on it unchanged.

    <out>/config.json         the resolved DigitsConfig (a rerun with other settings is refused)
    <out>/splits.json         indices and counts per split and per domain, source hashes
    <out>/cache/              backbone features per split, keyed by backbone fingerprint + data hash
    <out>/modules/backbone/   the MLP backbone; modules/classifier, experts/, heads/, router, gate
"""

import json
from dataclasses import replace
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from redkit.atomic import atomic_path, write_json
from redkit.errors import RedkitError
from redkit.modules.store import load_state, module_exists
from redkit.run import RUN_KINDS, Run
from redkit_experiments.digits.backbone import MLPBackbone, MLPBackboneConfig
from redkit_experiments.digits.config import DigitsConfig
from redkit_experiments.digits.data import (
    DIGIT_PAIRS,
    SPLIT_NAMES,
    Source,
    array_hash,
    domain_labels,
    load_source,
    make_splits,
)


@RUN_KINDS.register("digits")
class DigitsRun(Run):
    config_class = DigitsConfig
    space = DIGIT_PAIRS
    config: DigitsConfig

    @property
    def splits_path(self) -> Path:
        return self.dir / "splits.json"

    # ---- data ------------------------------------------------------------------------------

    @cached_property
    def source(self) -> Source:
        return load_source(self.config.data_dir, self.config.test_ratio, self.config.split_seed)

    def prepare_data(self) -> dict:
        """Write splits.json once; reruns reuse it, after checking the source is still the same data."""
        return self.summary

    @cached_property
    def summary(self) -> dict:
        """The content of splits.json (made once per run, checked once per process)."""
        if self.splits_path.is_file():
            summary = json.loads(self.splits_path.read_text())
            if summary["source"]["hashes"] != self.source.hashes():
                where = self.config.data_dir or "scikit-learn's digits"
                raise RedkitError(
                    f"{where}: the images differ from those {self.splits_path} was made from; "
                    "use another --out or delete it"
                )
            return summary
        summary = make_splits(self.source, self.config.val_ratio, self.config.base_ratio, self.config.split_seed)
        write_json(self.splits_path, summary)
        return summary

    @cached_property
    def splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """split -> (x (N, P) float32, y (N,) int64), for train / val / test."""
        out = {}
        for name in SPLIT_NAMES:
            split = self.summary["splits"][name]
            x, y = self.source.arrays[split["from"]]
            rows = np.asarray(split["indices"], dtype=np.int64)
            out[name] = (torch.from_numpy(x[rows]), torch.from_numpy(y[rows]))
        return out

    def base_subset(self) -> list[int]:
        """Positions in the train split of stage base's stratified `base_ratio` (fixed in splits.json)."""
        splits = self.summary["splits"]
        position = {index: i for i, index in enumerate(splits["train"]["indices"])}
        return [position[index] for index in splits["base"]["indices"]]

    @cached_property
    def data_hash(self) -> str:
        x, y = self.splits["train"]
        return array_hash(x.numpy(), y.numpy())

    # ---- backbone and features ---------------------------------------------------------------

    @property
    def backbone_config(self) -> MLPBackboneConfig:
        return replace(self.config.backbone, input_dim=self.source.pixels)

    @cached_property
    def backbone(self) -> MLPBackbone:
        """The trained backbone (stage base writes it); frozen from then on."""
        path = self.module_dir("backbone")
        if not module_exists(path):
            raise RedkitError(f"{path}: missing; stage base has not run yet, so there is no trained backbone")
        state, meta = load_state(path)
        backbone = MLPBackbone(self.backbone_config)
        if meta.config != vars(backbone.config):
            raise RedkitError(
                f"{path}: a backbone of {meta.config}, but this run's data and settings need {vars(backbone.config)}"
            )
        backbone.load_state_dict(state)
        return backbone.eval().requires_grad_(False).to(self.device)

    @cached_property
    def fingerprint(self) -> str:
        return self.backbone.fingerprint()

    @property
    def feature_dim(self) -> int:
        return self.config.backbone.hidden

    def forget_backbone(self) -> None:
        """Drop the loaded backbone and everything derived from it (stage base just replaced it)."""
        for name in ("backbone", "fingerprint", "_split_features"):
            self.__dict__.pop(name, None)

    @torch.no_grad()
    def features(self, name: str, x: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
        """(N, d) backbone features of images x (N, P), cached on disk by backbone fingerprint and data hash."""
        path = self.cache_dir / f"features-{name}-{self.fingerprint}-{array_hash(x.numpy())}.safetensors"
        if path.is_file():
            return load_file(str(path))["h"]
        h = (
            torch.zeros(0, self.feature_dim)
            if not len(x)
            else torch.cat(
                [self.backbone(x[i : i + batch_size].to(self.device)).cpu() for i in range(0, len(x), batch_size)]
            )
        )
        with atomic_path(path) as tmp:
            save_file({"h": h.contiguous()}, str(tmp))
        return h

    @cached_property
    def _split_features(self) -> dict[str, torch.Tensor]:
        return {}  # split -> (N, d), for this process: the stages ask for the same split several times

    def split_tensors(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h (N, d), digit classes (N,), pair domain labels (N,)) of a split."""
        x, y = self.splits[name]
        if name not in self._split_features:
            self._split_features[name] = self.features(name, x)
        return self._split_features[name], y, domain_labels(y)
