"""A finished study's directory opened again, for the scripts that measure more on its stream: its settings
(`config.json`) and its cache, so nothing is encoded again. No method's figures depend on it (source.py does
not follow it: nothing the study runs imports it)."""

import argparse
import json
from pathlib import Path

from redkit_experiments.incremental.study import IncrementalConfig, StudyContext


def open_study(directory: Path) -> StudyContext:
    """The study context `redkit study incremental --out DIRECTORY` ran with."""
    saved = json.loads((Path(directory) / "config.json").read_text())
    config = IncrementalConfig(**{k: tuple(v) if k == "methods" else v for k, v in saved.items()})
    return StudyContext(config, Path(directory))


def study_arguments(description: str) -> argparse.ArgumentParser:
    """A script's parser: the study directory, and where its figures go (JSON)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("study", type=Path, help="a `redkit study incremental` directory (its config and cache)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the figures (JSON)")
    return parser
