"""How the rank of an owner's scatter factor was chosen (`--router-option scatter_rank=R`): on the owners' val, never
the test.

    redkit federate --rounds 0 --joint-epochs 0 --no-one-machine --out runs/federate-compact
    python scripts/scatter_rank_grid.py --federation runs/federate-compact [--split test]

For every rank r, each owner's scatter in the assembled run is replaced by its rank-r factor as an owner would keep
it (redkit/incremental/scatter_factor.py: the same function, rebuilt the same way), router and gate are built from
the sums again with their own shrinkage, and RED (the run's `red` composition: nothing else changes) is scored on
the owners' val (their val.jsonl files, concatenated: CLINC150's val) or, with `--split test`, on the test the
federation kept apart. Printed per rank: the accuracy and the bytes a factor takes (M × r int16) against the
whole scatter's (M × M float64). A rank is chosen on val: the best accuracy, the smaller rank on a tie.
"""

import argparse
import json
import tempfile
from pathlib import Path

from redkit.api import load
from redkit.compositions import ModuleSet
from redkit.evaluate import evaluate_file
from redkit.incremental.gaussian import discriminant
from redkit.incremental.scatter_factor import factor
from redkit.incremental.statistics import ClassStatistics, merge
from redkit.modules.store import load_module
from redkit.routers.gaussian import STATISTICS, routing_dim

RANKS = (0, 128, 256, 384, 512, 768)  # 0: the whole scatter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--federation", type=Path, required=True, help="a `redkit federate` directory (RED's round)")
    parser.add_argument("--split", choices=("val", "test"), default="val")
    parser.add_argument("--ranks", default=",".join(map(str, RANKS)))
    args = parser.parse_args()
    run = load(args.federation / "model").run
    shares = {}
    for domain in run.space.domains:
        module, _ = load_module(run.module_dir(STATISTICS, domain), run.fingerprint, routing_dim(run))
        shares[domain] = module.statistics()
    width = next(iter(shares.values())).scatter.shape[0]
    with tempfile.TemporaryDirectory() as scratch:
        if args.split == "val":
            path = Path(scratch) / "val.jsonl"
            owners = sorted((args.federation / "owners-data").iterdir())
            path.write_text("".join((owner / "val.jsonl").read_text() for owner in owners))
        else:
            path = args.federation / "data" / "test.jsonl"
        rows = {}
        for rank in map(int, args.ranks.split(",")):
            kept = {d: with_factor(s, rank) for d, s in shares.items()}
            modules = ModuleSet(run)
            for role in ("router", "gate"):  # rebuilt from the sums, each with its own shrinkage
                built = getattr(modules, role)()
                weight, bias = discriminant(merge(kept), built.config.shrinkage)
                built.weight.copy_(weight.float())
                built.bias.copy_(bias.float())
            accuracy = evaluate_file(run, modules, path, ["red"])["red"]["accuracy"]
            rows[rank] = {"accuracy": accuracy, "scatter_bytes": width * (rank * 2 if rank else width * 8)}
            print(
                f"rank {rank or 'whole':>5}: {args.split} accuracy {accuracy:.4f}, {rows[rank]['scatter_bytes']:,} bytes"
            )
    print(json.dumps({"split": args.split, "ranks": rows}))


def with_factor(stats: ClassStatistics, rank: int) -> ClassStatistics:
    if not rank:
        return stats
    return ClassStatistics(stats.labels, stats.counts, stats.means, factor(stats.scatter, rank).scatter())


if __name__ == "__main__":
    main()
