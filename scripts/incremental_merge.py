"""Several `redkit study incremental` directories of one stream as one study: results.json, report.md and the plot.

    python scripts/incremental_merge.py runs/inc-d0-all runs/inc-d0 runs/inc-d0-ft

Why: a study's settings include the fine-tuning strategies' hyperparameters (hyperparameters.py, tuned.json), so a
study whose replay-free methods ran before the tuning stream chose them cannot be resumed with the strategies
after it; and a study may run its methods on several machines at once (the strategies on a GPU, the replay-free
methods here), one directory each. The methods that read those hyperparameters are the fine-tuning strategies
only (hyperparameters.py: `reads_hyperparameters`); every other method gives the same figures under either.
This script joins such directories, refusing to join anything else: the same stream (its texts, classes and
steps: `stream`, wherever the data was read from), protocol, order and seed; every method made by the code of
this checkout (its source sha256, source.py); settings equal apart from `hyperparameters`, `device` and the
data's directory; each method from one directory only; and no method that reads the hyperparameters from a
directory whose hyperparameters differ from the directory that gives the strategies. Each method's device is
kept beside it (`devices`, a column of the report): seconds on a GPU are not seconds here.
"""

import argparse
import json
from pathlib import Path

from redkit.atomic import write_json, write_text
from redkit_experiments.incremental.hyperparameters import reads_hyperparameters
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.report import figure_steps, render_report
from redkit_experiments.incremental.source import method_source

SAME = ("protocol", "order", "classes_per_task", "seed", "trainable_layers", "max_length")
MAY_DIFFER = ("methods", "hyperparameters", "device", "data_dir")  # the data: by its content, `stream`


def current_source(name: str) -> str:
    """The sha256 this checkout's code gives method `name` (what the study records in methods/NAME.json)."""
    return method_source(METHODS[name].__module__)


def merge(studies: list[Path], source_of=current_source) -> dict:
    results = [json.loads((d / "results.json").read_text()) for d in studies]
    first = results[0]
    for d, r in zip(studies, results):
        differs = [k for k in SAME if r["config"][k] != first["config"][k]]
        if r.get("stream") != first.get("stream"):
            differs.append("data")
        if differs or r["steps"] != first["steps"]:
            raise SystemExit(f"{d}: another stream or seed ({', '.join(differs) or 'steps'}) than {studies[0]}")
        rest = {k: v for k, v in r["config"].items() if k not in MAY_DIFFER}
        if rest != {k: v for k, v in first["config"].items() if k not in MAY_DIFFER}:
            raise SystemExit(
                f"{d}: settings other than the hyperparameters, device and data directory differ from {studies[0]}"
            )
    methods, origin, devices, tuned = {}, {}, {}, None
    for d, r in zip(studies, results):
        for name, m in r["methods"].items():
            if name in methods:
                raise SystemExit(f"{name} is in both {origin[name]} and {d}: keep it in one")
            if m["code"]["source"] != source_of(name):
                raise SystemExit(
                    f"{d}/methods/{name}.json: made by other code than this checkout's "
                    f"(source {m['code']['source'][:8]}, commit {m['code'].get('commit', 'unrecorded')})"
                )
            if reads_hyperparameters(name):
                if tuned not in (None, r["config"]["hyperparameters"]):
                    raise SystemExit(f"{d}: {name} under other hyperparameters than the other strategies")
                tuned = r["config"]["hyperparameters"]
            methods[name], origin[name], devices[name] = m, str(d), r["config"].get("device", "cpu")
    merged = first | {"methods": methods, "merged_from": origin, "devices": devices}
    merged["config"] = first["config"] | {"methods": list(methods), "hyperparameters": tuned}
    merged["prepare_seconds"] = max(r["prepare_seconds"] for r in results)
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the joined study's directory (results.json, report.md, figures)")
    parser.add_argument("studies", nargs="+", type=Path, help="study directories of one stream and seed")
    args = parser.parse_args()
    merged = merge(args.studies)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "results.json", merged)
    text = render_report(merged, figure_steps(args.out, merged))
    write_text(args.out / "report.md", text)
    print(text)


if __name__ == "__main__":
    main()
