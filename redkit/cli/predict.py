"""`redkit predict --run RUN "TEXT"`: one answer, with the router's weight for every expert."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("question")
    p.add_argument("--composition", default="red")


@command("predict", options=_options, help="answer one question, with the router's weight for every expert "
                                            "(a steps run prints the program and every step)")
def run(args) -> None:
    from redkit.api import load
    from redkit.compositions import COMPOSITIONS

    COMPOSITIONS[args.composition]  # an unknown name fails before any work
    fitted = load(args.run)
    p = fitted.predict([args.question], args.composition)[0]
    if p.steps:  # a steps run: the program and every step
        _print_steps(fitted, p, args.composition)
        return
    if fitted.run.config.task == "fit":
        print(f"label: {p.label}  (p = {p.probability:.3f}, composition {args.composition})")
    else:
        from redkit.data.vocabulary import SHORT_NAMES, domain_of

        print(f"answer: {p.label}  (range {SHORT_NAMES[domain_of(p.label)]}, p = {p.probability:.3f}, composition {args.composition})")
    print("expert weights: " + "  ".join(f"{name} {w:.3f}" for name, w in p.weights.items()))


def _print_steps(fitted, p, composition: str) -> None:
    from redkit.programs import render_program

    print("program:\n  " + render_program(p.program).replace("\n", "\n  "))
    for k, step in enumerate(p.steps, start=1):
        weights = ("  ".join(f"{name} {w:.3f}" for name, w in zip(fitted.domains, step.weights))
                   if step.weights is not None else "none")
        print(f"step {k}: {step.question!r}  expert weights: {weights}  -> x{k} = {step.value}")
    print(f"answer: {p.label}  (composition {composition})")
