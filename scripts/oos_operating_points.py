"""A fit run's out-of-scope rule read at both operating points, each threshold chosen on val: Larson et al.'s (the
best pooled accuracy on val and oos_val: the run's own, in oos.json) and issue 44's (the most val OOS queries
rejected while giving up at most 1 point of val in-scope accuracy), on test and oos_test.

    python scripts/oos_operating_points.py runs/clinc-rf2 [--composition red] [--json out.json]

The score is the one the run chose on val (oos.json), with its standardising statistics; nothing is chosen on test.
"""

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("--composition", default="red")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()

    import redkit
    from redkit.compositions import ModuleSet
    from redkit.fitting.replay_free import is_replay_free
    from redkit.jsonfile import read_json
    from redkit.oos.evaluate import OOS_FILE, _numpy, _scored, _with_sums, views_of
    from redkit.plugins import load_plugins
    from redkit_experiments.incremental.oos_operating_points import read_at_both

    load_plugins()
    run = redkit.load(args.run).run
    rule = read_json(args.run / OOS_FILE, "an OOS threshold file")[args.composition]
    stats = {args.composition: {k: tuple(v) for k, v in rule["stats"].items()}} if "stats" in rule else {}
    modules, views = ModuleSet(run), None if is_replay_free(run.config) else views_of(run)
    split, every = {}, {}
    for name, oos in (("val", "oos_val"), ("test", "oos_test")):
        scored = _scored(run, modules, [args.composition], name, run.splits[name], oos, views)
        every[name], right, scores_out = _numpy(_with_sums(scored, stats))[args.composition]
        split[name] = (every[name][rule["score"]], right, scores_out[rule["score"]])
    figures = {"run": str(args.run), "composition": args.composition, "score": rule["score"]}
    if rule["score"] == "owners":  # the ridge's weight chosen on val: its val sd over the spread it is divided by
        figures["ridge_weight"] = round(float(every["val"]["ridge"].std(ddof=1)) / rule["stats"]["ridge"][1], 3)
    figures |= read_at_both(split["val"], split["test"])
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
