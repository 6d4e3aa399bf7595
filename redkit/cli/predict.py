"""`redkit predict --run RUN "TEXT"`: one answer, with the router's weight for every expert."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.cli.evaluate import _open_text_run


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("question")
    p.add_argument("--composition", default="red")


@command("predict", options=_options, help="answer one question, with the router's weight for every expert "
                                              "(a steps run prints the program and every step)")
def run(args) -> None:
    import torch

    from redkit.compositions import COMPOSITIONS, ModuleSet, compose
    from redkit.data.vocabulary import SHORT_NAMES, domain_of
    from redkit.features import encode
    from redkit.steps import StepsRun

    COMPOSITIONS[args.composition]  # an unknown name fails before any work
    run = _open_text_run(args.run)
    if isinstance(run, StepsRun):
        from redkit.programs import render_program
        from redkit.steps.questions import explain

        program, trace = explain(run, args.question, args.composition)
        print("program:\n  " + render_program(program).replace("\n", "\n  "))
        for k, step in enumerate(trace, start=1):
            weights = ("  ".join(f"{name} {w:.3f}" for name, w in zip(run.space.domains, step.weights))
                       if step.weights is not None else "none")
            print(f"step {k}: {step.question!r}  expert weights: {weights}  -> x{k} = {step.value}")
        print(f"answer: {trace[int(program.answer_var[1:]) - 1].value}  (composition {args.composition})")
        return
    modules = ModuleSet(run)
    h = encode(run.backbone, [args.question]).to(run.device)
    with torch.no_grad():
        alpha_router = torch.softmax(modules.router()(h), dim=-1)[0]
    composed = compose(args.composition, modules, h, alpha_router.argmax().unsqueeze(0))
    answer = run.space.value_of(int(composed.probs[0].argmax()))
    print(f"answer: {answer}  (range {SHORT_NAMES[domain_of(answer)]}, p = {composed.probs[0].max():.3f}, composition {args.composition})")
    weights = composed.weights[0] if composed.weights is not None else alpha_router
    print("expert weights: " + "  ".join(f"{name} {w:.3f}" for name, w in zip(run.space.domains, weights.tolist())))
