"""Child runs (ablation variants, seed replicates) share their parent's data files instead of
regenerating them: hard links where the filesystem allows, copies where it does not."""

import os
import shutil
from pathlib import Path

# Per-run draws a child must make for itself (its own base fraction or seed): never shared.
RUN_OWN = ("base_subset.json", "base_val_subset.json")


def link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def link_data(source: Path, target: Path) -> None:
    """The parent's data files (source = its data/ folder) in a child's data/ folder."""
    for path in Path(source).iterdir():
        if path.is_file() and path.name not in RUN_OWN and not (target / path.name).exists():
            link_or_copy(path, Path(target) / path.name)
