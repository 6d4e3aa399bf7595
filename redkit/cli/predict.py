"""`redkit predict --run RUN [TEXT ...] [--file FILE] [--json]`: an answer per text, with the router's
weight for every expert; texts from the arguments, a file or stdin, one per line.

    redkit predict --run runs/task1 "What is 12 plus 27?" "What is 40 minus 3?"
    redkit predict --run runs/mine --file questions.txt --json      # one JSON object per line
    cat questions.txt | redkit predict --run runs/mine

On a bundle with a serving graph (`redkit export`), the answer comes from ONNX Runtime: neither
torch, transformers nor scikit-learn is imported, and one text takes about a second, start-up
included. On a run (or another composition than the bundle's), the run's own modules answer, through
torch, in a few seconds (docs/guides/commands.md gives both measurements).
"""

import argparse
import json
import sys
from pathlib import Path

from redkit.cli.command import command
from redkit.errors import RedkitError

TEXT_WIDTH = 48  # of the table's text column; longer texts are cut with "…"


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", "--bundle", dest="run", required=True, type=Path, help="a trained run or a bundle")
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to answer (none: --file, else stdin, one per line)")
    p.add_argument("--file", type=Path, help="a UTF-8 file of texts, one per line (blank lines skipped)")
    p.add_argument("--json", action="store_true", help="one JSON object per text and line, instead of a table")
    p.add_argument("--composition", default="red")


def read_texts(args) -> list[str]:
    """The texts to answer, from the arguments, else --file, else stdin; checked before any work."""
    if args.texts and args.file:
        raise RedkitError("give texts as arguments or with --file, not both")
    if args.texts:
        lines = args.texts
    elif args.file:
        try:
            lines = args.file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise RedkitError(f"--file {args.file}: cannot read it as UTF-8 text ({type(err).__name__})") from None
    elif not sys.stdin.isatty():
        lines = sys.stdin.read().splitlines()
    else:
        lines = []
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise RedkitError("no text to answer: give texts as arguments, --file FILE, or on stdin (one per line)")
    return texts


class Served:
    """What the table and the records need from a FittedRun, for a bundle answered by its serving graph."""

    def __init__(self, predictor):
        self.predictor, self.domains = predictor, predictor.domains

    def label_details(self, label) -> dict:
        return self.predictor.settings.get("label_details", {}).get(str(label), {})

    def predict(self, texts: list[str]) -> list:
        from redkit.prediction import Prediction

        return [Prediction(**answer) for answer in self.predictor.predict(texts)]


def _served(path: Path, composition: str) -> Served | None:
    """The bundle's serving graph where it answers `composition`; else None (the run's modules answer)."""
    from redkit.bundle.manifest import SERVING, SETTINGS, is_bundle, read_manifest

    if not is_bundle(path):
        return None
    manifest = read_manifest(path)
    if (
        f"{SERVING}/{SETTINGS}" not in manifest["files"]
        or manifest.get("serving", {}).get("composition") != composition
    ):
        return None
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:  # not installed (pip install 'redkit[serve]'): the run's modules answer
        return None
    from redkit.serve.predictor import BundlePredictor

    return Served(BundlePredictor.open(path))


@command(
    "predict",
    options=_options,
    help="answer texts, with the router's weight for every expert (a steps run prints the program and every step)",
    plugins=False,  # loaded below only where the run's modules answer
)
def run(args) -> None:
    texts = read_texts(args)
    served = _served(args.run, args.composition)
    if served is not None:
        fitted, predictions = served, served.predict(texts)
    else:
        from redkit.api import load
        from redkit.compositions import COMPOSITIONS
        from redkit.plugins import load_plugins

        load_plugins()
        COMPOSITIONS[args.composition]  # an unknown name fails before any work
        fitted = load(args.run)
        predictions = fitted.predict(texts, args.composition)
    if args.json:
        for text, p in zip(texts, predictions):
            print(json.dumps(_record(fitted, text, p), ensure_ascii=False))
    elif predictions[0].steps:  # a steps run: the program and every step of each text
        for k, (text, p) in enumerate(zip(texts, predictions)):
            print(("\n" if k else "") + f"text: {text}")
            _print_steps(fitted, p, args.composition)
    else:
        _print_table(fitted, texts, predictions, args.composition)


def _record(fitted, text: str, p) -> dict:
    record = {"text": text, "label": p.label, "probability": p.probability, "weights": p.weights}
    if p.out_of_scope is not None:  # the run has an OOS threshold for this composition (fit --oos, clinc150)
        record["out_of_scope"] = p.out_of_scope
    record |= fitted.label_details(p.label)  # Task 1/2: the answer's range
    if p.steps:
        record["program"] = str(p.program)
        record["steps"] = [
            {
                "text": s.question,
                "value": s.value,
                "weights": None if s.weights is None else dict(zip(fitted.domains, map(float, s.weights))),
            }
            for s in p.steps
        ]
    return record


def _print_table(fitted, texts: list[str], predictions: list, composition: str) -> None:
    """One row per text: the text, the label (and a Task 1/2 answer's range), its probability, and the
    router's weight for every expert (one column per domain)."""
    ranges = [fitted.label_details(p.label).get("range") for p in predictions]
    head = ["text", "label" if ranges[0] is None else "answer"] + ([] if ranges[0] is None else ["range"]) + ["p"]
    head += list(fitted.domains)
    # Under the run's OOS threshold (fit --oos, clinc150) a text may be answered "out of scope".
    rows = [
        [
            text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…",
            "out of scope" if p.out_of_scope else str(p.label),
        ]
        + ([] if r is None else [r])
        + [f"{p.probability:.3f}"]
        + [f"{p.weights[d]:.3f}" for d in fitted.domains]
        for text, p, r in zip(texts, predictions, ranges)
    ]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    print(f"composition {composition}; one column of expert weights per domain")
    for row in [head, *rows]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
            ).rstrip()
        )


def _print_steps(fitted, p, composition: str) -> None:
    print("program:\n  " + str(p.program).replace("\n", "\n  "))
    for k, step in enumerate(p.steps, start=1):
        weights = (
            "  ".join(f"{name} {w:.3f}" for name, w in zip(fitted.domains, step.weights))
            if step.weights is not None
            else "none"
        )
        print(f"step {k}: {step.question!r}  expert weights: {weights}  -> x{k} = {step.value}")
    print(f"answer: {p.label}  (composition {composition})")
