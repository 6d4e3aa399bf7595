"""`redkit eval --run RUN --data FILE [--composition NAME ...]`: a trained run on any file."""

import argparse
import logging
import sys
from contextlib import contextmanager
from pathlib import Path

from redkit.cli.command import command


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--composition", action="append", default=None)


@command(
    "eval", options=_options, help="evaluate a trained run on any JSONL file (a steps run decomposes and executes it)"
)
def run(args) -> None:
    from redkit.api import load

    fitted = load(args.run)
    if not args.composition:
        missing = fitted.compositions()[1]
        if missing:
            if getattr(fitted.run, "bundle", None) is not None:
                print(f"not in this bundle: {', '.join(missing)} (export with --heads)")
            else:  # a run assembled from owners' contributions (redkit/federated)
                print(f"not in this run: {', '.join(missing)} (assembled from owners: no pooled data trained them)")
    with _saying_reused_features():  # a file whose texts are a split the run cached is not encoded again
        result = fitted.evaluate(args.data, args.composition)
    if "compositions" in result:  # a steps run: questions decomposed and executed
        _print_steps(args.data, result)
        return
    first = next(iter(result.values()))
    print(f"{args.data}: {first['n']} examples")
    if "range_accuracy" in first:
        print(f"{'composition':14s} {'accuracy':>9s} {'range acc':>9s} {'macro-F1':>9s}")
        for name, m in result.items():
            print(f"{name:14s} {m['accuracy']:9.4f} {m['range_accuracy']:9.4f} {m['macro_f1']:9.4f}")
        return
    print(f"{'composition':14s} {'accuracy':>9s} {'domain acc':>10s} {'macro-F1':>9s}")
    for name, m in result.items():
        domain = f"{m['domain_accuracy']:10.4f}" if m.get("domain_accuracy") is not None else f"{'-':>10s}"
        print(f"{name:14s} {m['accuracy']:9.4f} {domain} {m['macro_f1']:9.4f}")
    if first["unseen_labels"]:
        print(
            f"{first['unseen_labels']} of {first['n']} examples have a label never seen in training: counted as wrong"
        )


def _print_steps(path: Path, result: dict) -> None:
    match = result["program_exact_match"]
    print(
        f"{path}: {result['n']} questions, decomposed and executed; program exact-match "
        + (
            f"{match:.4f} (the {result['with_program']} records with a program)"
            if match is not None
            else "n/a (no record has a program)"
        )
    )
    groups = list(next(iter(result["compositions"].values())))
    print(f"{'composition':14s} " + " ".join(f"{g + ' acc':>11s}" for g in groups))
    for name, m in result["compositions"].items():
        print(f"{name:14s} " + " ".join(f"{m[g]['accuracy']:11.4f}" for g in groups))
    print("n: " + ", ".join(f"{g} {m['n']}" for g, m in next(iter(result["compositions"].values())).items()))


@contextmanager
def _saying_reused_features():
    """Say, on stderr beside the progress bars (stdout stays the table), the library's one line per features
    read from the run's cache (redkit.features' log), once the evaluation has succeeded: an error stays the
    one line it is."""
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    log = logging.getLogger("redkit.features")
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
    for line in said:
        print(line, file=sys.stderr)
