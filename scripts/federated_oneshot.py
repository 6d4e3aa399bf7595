"""The one-shot federated baselines built for frozen pretrained models, on CLINC150 split by domain as `redkit
federate` splits it: FedNCM, Fed3R (with and without random features) and FedCOF (redkit/federated/oneshot/).

    python scripts/federated_oneshot.py                      # -> runs/federated-oneshot/results.json
    python scripts/federated_oneshot.py --federate RUN       # beside `redkit federate --out RUN`, and the figure

Ten owners, one domain each (redkit/federated/federate.py: split_owners, load_run_data(..., seed, 0.1)): each
computes its upload from the frozen features of its own 1,500 training queries, once; the server builds the
classifier; the experimenter scores it on CLINC150's 4,500 in-scope test queries. The features are the pretrained
all-MiniLM-L6-v2's, mean-pooled, through the federation plan's backbone (redkit/federated/plan.py), computed once
per split and cached under OUT/cache (a text's features do not depend on the other texts encoded with it, up to
the float rounding of a batch's padding: each owner would compute the same numbers alone).

Every setting is chosen on the ten owners' 3,000 validation queries pooled, never on test: the grid of each
method is printed, the best by val accuracy kept (ties: the first in the grid's order, cheaper first). A setting
of the plan (Fed3R-RF's width and σ, FedCOF's subsets) changes what the owners compute: tuning it in a real
federation costs a round per candidate (and a round for the owners to score a candidate on their val), which the
one round counted here leaves out, as RED's settings, chosen once on the same val, are left out of its round.

For each method: val and test accuracy, the chosen settings, bytes up per owner (mean, max) and in all, in the
method's wire type, in its compact form (as `redkit federate` sends RED's module files) and in the other type
(with the test accuracy the other wire gives), bytes down (the plan), seconds (owners', server's, the grid's), and
the classifier's size. Two plan settings buy accuracy with bytes,
Fed3R-RF's width D (an owner sends (D+1)² floats) and FedCOF's subsets (the authors' Init_FT_LP option, a departure
from their training-free method: several means per class from one owner): each is also reported whole (`sweep`:
for each value, its best other settings by val, scored on val and test), beside the val-chosen row.
"""

import redkit

redkit.reproducible()  # the CLI's kernels (before torch is imported)

import argparse  # noqa: E402
import itertools  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from redkit.atomic import write_json  # noqa: E402
from redkit.backbone import Backbone  # noqa: E402
from redkit.features import cached_features  # noqa: E402
from redkit.federated.oneshot import ONESHOT, as_wire, compact_bytes, upload_bytes  # noqa: E402
from redkit.federated.plan import FederationPlan  # noqa: E402
from redkit.fitting.data import load_run_data  # noqa: E402
from redkit.fitting.records import Fields  # noqa: E402
from redkit.jsonfile import read_json  # noqa: E402
from redkit.provenance import provenance  # noqa: E402

RIDGES = tuple(10.0**k for k in range(-8, 4))  # ρ: λ = ρ tr(G) / D'
SHRINKS = tuple(10.0**k for k in range(-6, 4))  # FedCOF's γ (the authors': 0.1 and 1)
SIGMAS = (4.0, 8.0, 16.0, 32.0)  # Fed3R-RF's kernel width (the features' median distance: 8.0)
# name -> (registry entry, plan grid, server grid, the plan setting that trades bytes for accuracy: swept whole);
# a plan grid's first values are the cheapest
RUNS = {
    "fedncm": ("fedncm", {}, {}, None),
    "fed3r": ("fed3r", {}, {"ridge": RIDGES}, None),
    "fed3r-rf": ("fed3r-rf", {"width": (1024, 2048, 4096, 8192), "sigma": SIGMAS}, {"ridge": RIDGES}, "width"),
    "fed3r-relu": ("fed3r-relu", {"width": (2048,)}, {"ridge": RIDGES}, None),
    "fedcof": ("fedcof", {"subsets": (1,)}, {"shrink": SHRINKS}, None),
    "fedcof-subsets": ("fedcof", {"subsets": (2, 5, 10, 25, 50)}, {"shrink": SHRINKS}, "subsets"),
}
PAPERS = {
    "fedncm": "Legate et al., NeurIPS 2023 (FedNCM)",
    "fed3r": "Fanì et al., ICML 2024 (Fed3R)",
    "fed3r-rf": "Fanì et al., ICML 2024 (Fed3R-RF: random Fourier features)",
    "fed3r-relu": "not in a paper: Fed3R on RED's random ReLU features (M = 2,048)",
    "fedcof": "Goswami et al., NeurIPS 2025 (FedCOF, the authors' training-free code: one mean per class)",
    "fedcof-subsets": "FedCOF with the authors' Init_FT_LP --subsets (several means per class and owner): a departure",
}
WIRE_NAMES = {torch.float32: "float32", torch.float64: "float64"}


def owner_data(data, features: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor, tuple]]:
    """{domain: (h (N_k, d), y (N_k,), its labels)}: each owner's training features, y indexing its own labels."""
    train = data.splits["train"]
    owners = {}
    for domain in data.domains:
        rows = [i for i, r in enumerate(train) if r.domain == domain]
        present = {train[i].answer for i in rows}
        labels = tuple(label for label in data.labels if label in present)
        y = torch.tensor([labels.index(train[i].answer) for i in rows])
        owners[domain] = (features["train"][rows], y, labels)
    return owners


def reference(run: Path | None) -> dict | None:
    """RED's, FedAvg's and the central joint's figures from a `redkit federate` run (its results.json), read, not
    typed in."""
    if run is None:
        return None
    federated = read_json(run / "results.json", "the federate run's results")
    red = federated["red"]
    return {
        "run": str(run),
        "git_commit": federated["provenance"].get("git_commit"),
        "red_one_round": {
            "test_accuracy": red["accuracy"],
            "bytes_up_total": red["bytes_up"],
            "bytes_up_per_owner": red["bytes_up"] / len(red["owners"]),
        },
        "fedavg": [{k: r.get(k) for k in ("round", "accuracy", "bytes_up", "bytes_down")} for r in federated["fedavg"]],
        "joint_central": federated.get("joint_central", {}).get("accuracy"),
    }


def combos(grid: dict) -> list[dict]:
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def federate_once(method, owners: dict, wire: torch.dtype | None = None, compact: dict | None = None) -> tuple:
    """Every owner's upload (in `wire`, or the method's own), merged as they arrive (in the order of the owners'
    names): (merged, {owner: bytes}, {owner: seconds}); `compact` given: {owner: bytes in the compact form} put in
    it (as RED's modules travel: compact_bytes)."""
    sizes, seconds = {}, {}

    def arriving():
        for name in tqdm(sorted(owners), desc=f"{method.name} owners", leave=False, dynamic_ncols=True):
            start = time.perf_counter()
            upload = method.upload(*owners[name])
            seconds[name] = time.perf_counter() - start
            upload = upload if wire is None else as_wire(upload, wire)
            sizes[name] = upload_bytes(upload)
            if compact is not None:
                compact[name] = compact_bytes(upload)
            yield name, upload

    return method.aggregate(arriving()), sizes, seconds


def bytes_summary(sizes: dict[str, int]) -> dict:
    values = list(sizes.values())
    return {"mean": sum(values) / len(values), "max": max(values), "total": sum(values), "by_owner": sizes}


def run_method(run: str, owners: dict, features: dict, truth: dict, dim: int, seed: int) -> dict:
    entry, plan_grid, server_grid, swept = RUNS[run]
    if "seed" in ONESHOT[entry].plan_defaults:  # the random features' and the subsets' draws
        plan_grid = {"seed": (seed,)} | plan_grid
    print(f"\n== {run}: {PAPERS[run]}")
    print(f"   grid: plan {plan_grid or '-'}, server {server_grid or '-'} (chosen by val accuracy)")
    start = time.perf_counter()
    rows = []
    for plan in tqdm(combos(plan_grid), desc=f"{run} plans", leave=False, dynamic_ncols=True):
        method = ONESHOT[entry](dim, **plan)
        merged, sizes, _ = federate_once(method, owners)
        for options in combos(server_grid):
            val = method.classifier(merged, **options).accuracy(features["val"], truth["val"])
            rows.append({"plan": plan, "options": options, "val_accuracy": val, "bytes_per_owner": max(sizes.values())})
            print(
                f"   {str(plan or ''):42s} {str(options or ''):28s} val {val:.4f}   {max(sizes.values()):>12,d} B/owner"
            )
        del merged
    grid_seconds = time.perf_counter() - start
    best = max(range(len(rows)), key=lambda i: (rows[i]["val_accuracy"], -i))  # the first of equals
    plan, options = rows[best]["plan"], rows[best]["options"]

    method, compact_sizes = ONESHOT[entry](dim, **plan), {}
    merged, sizes, owner_seconds = federate_once(method, owners, compact=compact_sizes)
    start = time.perf_counter()
    classifier = method.classifier(merged, **options)
    server_seconds = time.perf_counter() - start
    other = torch.float32 if method.wire == torch.float64 else torch.float64
    merged_other, sizes_other, _ = federate_once(method, owners, wire=other)
    result = {
        "paper": PAPERS[run],
        "method": entry,
        "plan": method.plan(),
        "options": options,
        "val_accuracy": classifier.accuracy(features["val"], truth["val"]),
        "test_accuracy": classifier.accuracy(features["test"], truth["test"]),
        "wire": WIRE_NAMES[method.wire],
        "bytes_up_per_owner": bytes_summary(sizes),
        "bytes_up_total": sum(sizes.values()),
        "compact_bytes_up_per_owner": bytes_summary(compact_sizes),  # as RED's modules travel (compact.py)
        "other_wire": {
            "wire": WIRE_NAMES[other],
            "bytes_up_per_owner": bytes_summary(sizes_other),
            "test_accuracy": method.classifier(merged_other, **options).accuracy(features["test"], truth["test"]),
        },
        "bytes_down_per_owner": method.plan_bytes(),
        "classifier_bytes": classifier.nbytes(),
        "classes": len(classifier.labels),
        "details": classifier.details,
        "seconds": {
            "owners_total": sum(owner_seconds.values()),
            "owner_max": max(owner_seconds.values()),
            "server": server_seconds,
            "grid": grid_seconds,
        },
        "grid": rows,
    }
    if "normalize" in method.server_defaults:  # Fed3R's column normalisation (the authors') left out, for reference
        raw = method.classifier(merged, **options | {"normalize": False})
        result["unnormalized"] = {
            "val_accuracy": raw.accuracy(features["val"], truth["val"]),
            "test_accuracy": raw.accuracy(features["test"], truth["test"]),
        }
    del merged, merged_other  # Fed3R-RF's at D = 8,192: 0.5 GB each
    if swept:  # the whole bytes/accuracy trade-off
        result["sweep"] = sweep(entry, swept, plan_grid, rows, owners, features, truth, dim)
        for row in result["sweep"]:
            print(
                f"   sweep {swept} {row['plan'][swept]}: best by val {row['plan']} {row['options']}: "
                f"val {row['val_accuracy']:.4f}, test {row['test_accuracy']:.4f}, "
                f"{row['bytes_up_per_owner_mean'] / 1e6:.3f} MB/owner up"
            )
    print(
        f"   chosen {plan or ''} {options or ''}: val {result['val_accuracy']:.4f}, test {result['test_accuracy']:.4f} "
        f"({WIRE_NAMES[other]}: {result['other_wire']['test_accuracy']:.4f}), "
        f"{result['bytes_up_per_owner']['mean'] / 1e6:.3f} MB/owner up "
        f"({result['compact_bytes_up_per_owner']['mean'] / 1e6:.3f} compact)"
    )
    return result


def sweep(entry, swept, plan_grid, rows, owners, features, truth, dim) -> list[dict]:
    """For each value of the plan setting `swept`, its best other settings by val, scored on val and test."""
    out = []
    for value in plan_grid[swept]:
        mine = [r for r in rows if r["plan"][swept] == value]
        best = max(range(len(mine)), key=lambda i: (mine[i]["val_accuracy"], -i))
        plan = mine[best]["plan"]
        method = ONESHOT[entry](dim, **plan)
        merged, sizes, _ = federate_once(method, owners)
        classifier = method.classifier(merged, **mine[best]["options"])
        out.append(
            {
                "plan": plan,
                "options": mine[best]["options"],
                "val_accuracy": mine[best]["val_accuracy"],
                "test_accuracy": classifier.accuracy(features["test"], truth["test"]),
                "bytes_up_per_owner_mean": sum(sizes.values()) / len(sizes),
                "means_sent": classifier.details.get("means"),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/clinc150"))
    parser.add_argument("--out", type=Path, default=Path("runs/federated-oneshot"))
    parser.add_argument("--seed", type=int, default=0, help="load_run_data's seed, as `redkit federate --seed`")
    parser.add_argument("--methods", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument(
        "--federate",
        type=Path,
        help="a `redkit federate` run on the same data and seed (RUN/results.json): its RED, FedAvg and joint "
        "figures go beside these, and OUT/accuracy_vs_bytes.png draws them all",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    torch.manual_seed(args.seed)

    data = load_run_data(args.data, "clinc150", Fields(), args.seed, 0.1)  # as split_owners reads it
    plan = FederationPlan(seed=args.seed)
    backbone = Backbone(plan.backbone).eval()
    features = {
        split: cached_features(args.out / "cache", backbone, [r.question for r in data.splits[split]], split)
        for split in ("train", "val", "test")
    }
    truth = {split: [r.answer for r in data.splits[split]] for split in ("val", "test")}
    owners = owner_data(data, features)
    dim = backbone.hidden_size
    print(
        f"{len(owners)} owners ({', '.join(f'{k}: {len(v[1])}' for k, v in owners.items())} training queries), "
        f"val {len(truth['val'])} pooled, test {len(truth['test'])}; features d = {dim}"
    )

    methods = {run: run_method(run, owners, features, truth, dim, args.seed) for run in args.methods}

    print(
        f"\n{'method':16s} {'val':>7s} {'test':>7s} {'MB/owner up':>12s} {'compact':>9s} {'MB total':>10s} "
        f"{'s owners':>9s} {'s server':>9s}"
    )
    for run, m in methods.items():
        print(
            f"{run:16s} {m['val_accuracy']:7.4f} {m['test_accuracy']:7.4f} "
            f"{m['bytes_up_per_owner']['mean'] / 1e6:12.3f} {m['compact_bytes_up_per_owner']['mean'] / 1e6:9.3f} "
            f"{m['bytes_up_total'] / 1e6:10.2f} "
            f"{m['seconds']['owners_total']:9.2f} {m['seconds']['server']:9.2f}   {m['plan'] or ''} {m['options'] or ''}"
        )
    results = {
        "setting": {
            "data": str(args.data),
            "split": "redkit federate's: one owner per domain (split_owners), CLINC150's own val and in-scope test",
            "owners": {name: {"train": len(v[1]), "classes": len(v[2])} for name, v in owners.items()},
            "val_pooled": len(truth["val"]),
            "test": len(truth["test"]),
            "features": "pretrained all-MiniLM-L6-v2, mean-pooled, the federation plan's backbone (frozen)",
            "dim": dim,
            "selection": "every setting by accuracy on the owners' val pooled (ties: the first in grid order)",
        },
        "seed": args.seed,
        "grids": {
            run: {"method": RUNS[run][0], "plan": RUNS[run][1], "server": RUNS[run][2], "swept": RUNS[run][3]}
            for run in args.methods
        },
        "methods": methods,
        "reference": reference(args.federate),
        "seconds": time.perf_counter() - start,
        "provenance": provenance(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "results.json", results)
    if args.federate:
        from redkit.federated.report import figure

        federated = read_json(args.federate / "results.json", "the federate run's results")
        print(f"figure: {args.out / figure(args.out, federated, oneshot=methods)}")
    print(f"\n{args.out / 'results.json'} ({results['seconds']:.0f} s; git {results['provenance']['git_commit']})")


if __name__ == "__main__":
    main()
