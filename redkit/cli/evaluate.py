"""`redkit eval --run RUN --data FILE [--composition NAME ...]`: a trained run on any file."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.errors import RedkitError


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--composition", action="append", default=None)


def _open_text_run(path: Path):
    """A run that answers questions (text or steps): eval and predict take text."""
    from redkit.digits.run import DigitsRun
    from redkit.open_run import open_run

    run = open_run(path)
    if isinstance(run, DigitsRun):
        raise RedkitError(f"{path} is a digits run: its images are evaluated by `redkit reproduce digits`, not from text")
    return run


def _compositions(run, names: list[str] | None, default: list[str]) -> list[str]:
    """The compositions asked for (unknown names fail before any work), else `default`; of the
    default, a bundle exported without heads evaluates those it has and names the others once."""
    from redkit.compositions import COMPOSITIONS, ModuleSet, available_compositions

    for name in names or ():
        COMPOSITIONS[name]
    if names:
        return names
    if run.bundle is None:
        return default
    usable, missing = available_compositions(ModuleSet(run), default)
    if missing:
        print(f"not in this bundle: {', '.join(missing)} (export with --heads)")
    return usable


@command("eval", options=_options,
         help="evaluate a trained run on any JSONL file (a steps run decomposes and executes it)")
def run(args) -> None:
    from redkit.compositions import COMPOSITIONS, ModuleSet
    from redkit.data.records import read_jsonl
    from redkit.pipeline import evaluate_file
    from redkit.steps import StepsRun

    run = _open_text_run(args.run)
    if isinstance(run, StepsRun):
        from redkit.steps.questions import evaluate_questions

        from redkit.steps.benchmark import MODES

        # Any integer answer: a question answered by decomposition is not bound to 2..100.
        result = evaluate_questions(run, read_jsonl(args.data, answers=None), _compositions(run, args.composition, list(MODES.values())))
        match = result["program_exact_match"]
        print(f"{args.data}: {result['n']} questions, decomposed and executed; program exact-match "
              + (f"{match:.4f} (the {result['with_program']} records with a program)" if match is not None
                 else "n/a (no record has a program)"))
        groups = list(next(iter(result["compositions"].values())))
        print(f"{'composition':14s} " + " ".join(f"{g + ' acc':>11s}" for g in groups))
        for name, m in result["compositions"].items():
            print(f"{name:14s} " + " ".join(f"{m[g]['accuracy']:11.4f}" for g in groups))
        print("n: " + ", ".join(f"{g} {m['n']}" for g, m in next(iter(result["compositions"].values())).items()))
        return
    names = _compositions(run, args.composition, COMPOSITIONS.names())
    results = evaluate_file(run, ModuleSet(run), args.data, names)
    print(f"{args.data}: {next(iter(results.values()))['n']} examples")
    print(f"{'composition':14s} {'accuracy':>9s} {'range acc':>9s} {'macro-F1':>9s}")
    for name, m in results.items():
        print(f"{name:14s} {m['accuracy']:9.4f} {m['range_accuracy']:9.4f} {m['macro_f1']:9.4f}")
