"""Several `redkit study incremental` directories of one stream as one study: results.json, report.md and the plot.

    python scripts/incremental_merge.py runs/inc-d0-all runs/inc-d0 runs/inc-d0-ft

Why: a study's settings include the fine-tuning strategies' hyperparameters (hyperparameters.py, tuned.json), so a
study whose replay-free methods ran before the tuning stream chose them cannot be resumed with the strategies
after it. The methods that read those hyperparameters are the fine-tuning strategies only (finetune, ewc, lwf,
er_*, derpp_*: `IncrementalConfig.step_training`, `hyper`); every other method gives the same figures under
either. So the strategies run in a second directory and this script joins the two, refusing to join anything
else: the same data, protocol, order, steps and seed, the same code (every method's source sha256), settings
equal apart from `hyperparameters`, each method from one directory only, and no method that reads the
hyperparameters from a directory whose hyperparameters differ from the directory that gives the strategies.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.atomic import write_json, write_text  # noqa: E402
from redkit.report import save_figure  # noqa: E402
from redkit_experiments.incremental.report import render_report  # noqa: E402

SAME = ("data_dir", "protocol", "order", "classes_per_task", "seed", "trainable_layers", "max_length")
READS_HYPERPARAMETERS = ("finetune", "ewc", "lwf", "er_", "derpp_")


def reads_hyperparameters(name: str) -> bool:
    return any(name == p or (p.endswith("_") and name.startswith(p)) for p in READS_HYPERPARAMETERS)


def merge(studies: list[Path]) -> dict:
    results = [json.loads((d / "results.json").read_text()) for d in studies]
    first = results[0]
    for d, r in zip(studies, results):
        differs = [k for k in SAME if r["config"][k] != first["config"][k]]
        if differs or r["steps"] != first["steps"]:
            raise SystemExit(f"{d}: another stream or seed ({', '.join(differs) or 'steps'}) than {studies[0]}")
        rest = {k: v for k, v in r["config"].items() if k not in ("methods", "hyperparameters")}
        if rest != {k: v for k, v in first["config"].items() if k not in ("methods", "hyperparameters")}:
            raise SystemExit(f"{d}: settings other than the hyperparameters differ from {studies[0]}")
    methods, source, origin, tuned = {}, None, {}, None
    for d, r in zip(studies, results):
        for name, m in r["methods"].items():
            if name in methods:
                raise SystemExit(f"{name} is in both {origin[name]} and {d}: keep it in one")
            if source not in (None, m["code"]["source"]):
                raise SystemExit(f"{d}/methods/{name}.json: other code (source {m['code']['source'][:8]})")
            source = m["code"]["source"]
            if reads_hyperparameters(name):
                if tuned not in (None, r["config"]["hyperparameters"]):
                    raise SystemExit(f"{d}: {name} under other hyperparameters than the other strategies")
                tuned = r["config"]["hyperparameters"]
            methods[name], origin[name] = m, str(d)
    merged = first | {"methods": methods, "merged_from": origin}
    merged["config"] = first["config"] | {"methods": list(methods), "hyperparameters": tuned}
    merged["prepare_seconds"] = max(r["prepare_seconds"] for r in results)
    return merged


def figure(out: Path, results: dict) -> str:
    """Accuracy after each step, one line per method: 20 colours for up to 20 methods (the study's own plot
    cycles 10), the fine-tuning strategies dashed, RED thick and black, `joint` a star where it was retrained."""
    fig, ax = plt.subplots(figsize=(8, 5))
    steps, colours = len(results["steps"]), plt.get_cmap("tab20").colors
    for i, (name, result) in enumerate(results["methods"].items()):
        points = [(r["step"], r["seen_accuracy"]) for r in result["per_step"] if "seen_accuracy" in r]
        style = {"color": colours[(2 * i) % 20 + (2 * i) // 20], "linewidth": 1.3, "marker": "o", "markersize": 3}
        if reads_hyperparameters(name):
            style |= {"linestyle": "--"}
        if name == "red":
            style |= {"color": "black", "linewidth": 2.6}
        if len(points) < steps:
            style |= {"linestyle": "none", "marker": "*", "markersize": 11}
        ax.plot(*zip(*points), **style, label=name)
    ax.set_xticks(range(1, steps + 1))
    ax.set_xlabel(f"step ({results['protocol']} protocol, order {results['order']})")
    ax.set_ylabel("test accuracy over every class seen")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="lower left")
    return save_figure(fig, out / "figures" / "accuracy_by_step.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the joined study's directory (results.json, report.md, figures)")
    parser.add_argument("studies", nargs="+", type=Path, help="study directories of one stream and seed")
    args = parser.parse_args()
    merged = merge(args.studies)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "results.json", merged)
    text = render_report(merged, figure(args.out, merged))
    write_text(args.out / "report.md", text)
    print(text)


if __name__ == "__main__":
    main()
