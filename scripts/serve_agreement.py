"""Does a bundle's serving graph answer as its run? Every test text of RUN through both.

    python scripts/serve_agreement.py --run RUN --bundle BUNDLE [--split test] [--batch 64]

The run's side is FittedRun.predict (torch, the run's modules); the bundle's is BundlePredictor
(ONNX Runtime), in batches of --batch. Prints the label agreement, the largest probability and
expert-weight differences, and both sides' wall time.
"""

import argparse
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument(
        "--split", default="test", help="a split of the run, or oos_test / oos_val (CLINC150's out-of-scope queries)"
    )
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()

    import redkit
    from redkit.plugins import load_plugins
    from redkit.serve.predictor import BundlePredictor

    load_plugins()
    fitted = redkit.load(args.run)
    if args.split.startswith("oos_"):
        texts = list(fitted.run.oos_texts[args.split])
    else:
        texts = [example.question for example in fitted.run.splits[args.split]]  # the text, whatever the kind
    start = time.perf_counter()
    expected = fitted.predict(texts)
    run_seconds = time.perf_counter() - start
    predictor = BundlePredictor.open(args.bundle)
    start = time.perf_counter()
    served = [a for i in range(0, len(texts), args.batch) for a in predictor.predict(texts[i : i + args.batch])]
    bundle_seconds = time.perf_counter() - start
    same = sum(str(a["label"]) == str(e.label) for a, e in zip(served, expected))
    dp = max(abs(a["probability"] - e.probability) for a, e in zip(served, expected))
    dw = max(
        float(np.max(np.abs(np.array(list(a["weights"].values())) - np.array(list(e.weights.values())))))
        for a, e in zip(served, expected)
    )
    oos = [(a["out_of_scope"], e.out_of_scope) for a, e in zip(served, expected)]
    print(
        f"{args.split}: {len(texts)} texts; labels identical {same}/{len(texts)}; max |dp| {dp:.2e}; "
        f"max |d weight| {dw:.2e}; out_of_scope identical {sum(x == y for x, y in oos)}/{len(oos)} "
        f"(bundle says out of scope: {sum(bool(x) for x, _ in oos)}, run: {sum(bool(y) for _, y in oos)})"
    )
    print(f"run (torch) {run_seconds:.1f} s; bundle (ONNX Runtime, batches of {args.batch}) {bundle_seconds:.1f} s")


if __name__ == "__main__":
    main()
