"""A bundle against the run it was exported from: sizes, and the test split's metrics recomputed
from the bundle alone against those in the run's results.json (every composition the bundle has).

    python scripts/bundle_vs_run.py BUNDLE RUN

A text run only (task1, task2): a steps run's results come from executed programs, not one file.
Exits 1 unless every metric dict is identical.
"""

import json
import sys
from pathlib import Path

from redkit.compositions import COMPOSITIONS, ModuleSet, available_compositions
from redkit.evaluate import evaluate_file
from redkit.run import open_run


def size(root: Path, skip: str | None = None) -> int:
    return sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file() and not (skip and skip in p.relative_to(root).parts)
    )


def main() -> int:
    bundle_dir, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
    print(f"bundle {size(bundle_dir):,} bytes; run {size(run_dir):,} bytes, {size(run_dir, 'cache'):,} without cache/")
    bundle = open_run(bundle_dir)
    modules = ModuleSet(bundle)
    names, missing = available_compositions(modules, COMPOSITIONS.names())
    expected = json.loads((run_dir / "results.json").read_text())["splits"]["test"]
    got = json.loads(
        json.dumps(evaluate_file(bundle, modules, run_dir / "data" / "test.jsonl", names))
    )  # tuples as JSON lists
    for name in names:
        print(
            f"{name:14s} accuracy: results.json {expected[name]['accuracy']:.6f}, bundle {got[name]['accuracy']:.6f}; "
            f"metrics identical: {got[name] == expected[name]}"
        )
    if missing:
        print(f"not in this bundle: {', '.join(missing)}")
    return 0 if all(got[name] == expected[name] for name in names) else 1


if __name__ == "__main__":
    sys.exit(main())
