"""Questions of any file answered by decomposed execution: what `redkit eval` and `redkit predict`
do with a steps run. Each question goes through the run's decomposer to a program, and the program
is executed step by step by the operation experts (steps/execute.py)."""

from collections.abc import Sequence

from redkit.compositions import ModuleSet
from redkit.errors import RedkitError
from redkit_experiments.arithmetic.programs import Program, execute_batch, parse_program, render_program
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.decomposer import load_decomposer
from redkit_experiments.decomposer.model import extract_numbers
from redkit_experiments.steps.execute import NeuralExecutor, StepTrace, execution_metrics


def _gold_programs(examples: Sequence[Example]) -> list[Program | None]:
    """Each record's own program, or None where it has none (an empty `program` counts as none);
    a malformed one is named."""
    programs = []
    for ex in examples:
        try:
            programs.append(parse_program(ex.program) if ex.program.strip() else None)
        except RedkitError as err:
            raise RedkitError(f"record {ex.id} ({ex.question!r}): {err}") from None
    return programs


def evaluate_questions(
    run, examples: Sequence[Example], compositions: Sequence[str], cache: dict | None = None
) -> dict:
    """Every question is decomposed by the run's decomposer and its program executed step by step:
        exact accuracy of the answers per composition, overall and by number of operations (the
        record's own program's where it has one, else the decomposer's), and program exact-match over
        the records that have a program. `cache` (step question -> features; by default the run's
    step_features) may be shared across calls."""
    for ex in examples:
        if len(extract_numbers(ex.question)) < 2:
            raise RedkitError(f"record {ex.id} ({ex.question!r}): fewer than two numbers, nothing to decompose")
    predicted = load_decomposer(run.decomposer_dir).predict([ex.question for ex in examples])
    gold = _gold_programs(examples)
    num_steps = [(g or p).num_steps for g, p in zip(gold, predicted)]
    with_program = [(p, g) for p, g in zip(predicted, gold) if g is not None]
    modules, cache = ModuleSet(run), (run.step_features() if cache is None else cache)
    answers = [ex.answer for ex in examples]
    return {
        "n": len(examples),
        "with_program": len(with_program),
        "program_exact_match": (
            sum(render_program(p) == render_program(g) for p, g in with_program) / len(with_program)
            if with_program
            else None
        ),
        "compositions": {
            name: execution_metrics(predicted, answers, NeuralExecutor(run, modules, name, cache), num_steps)
            for name in compositions
        },
    }


def explain(run, question: str, composition: str = "red") -> tuple[Program, list[StepTrace]]:
    """One question's program and, per step, what the experts were asked, their weights and the value."""
    program = load_decomposer(run.decomposer_dir).predict([question])[0]
    trace: list[StepTrace] = []
    execute_batch([program], NeuralExecutor(run, ModuleSet(run), composition, {}, trace), value_range=None)
    return program, trace
