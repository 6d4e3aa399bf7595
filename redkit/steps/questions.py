"""Questions of any file answered by decomposed execution: what `redkit eval` and `redkit predict`
do with a steps run. Each question goes through the run's decomposer to a program, and the program
is executed step by step by the operation experts (steps/execute.py)."""

from typing import Sequence

from redkit.compositions import ModuleSet
from redkit.data.records import Example
from redkit.decomposer import load_decomposer
from redkit.decomposer.model import extract_numbers
from redkit.errors import RedkitError
from redkit.programs import Program, execute_batch, parse_program, render_program
from redkit.steps.execute import NeuralExecutor, StepTrace, execution_metrics
from redkit.steps.run import StepsRun


def _gold_programs(examples: Sequence[Example]) -> list[Program] | None:
    """The file's own programs, when every record has one; a malformed one is named."""
    if not examples or any(ex.program is None for ex in examples):
        return None
    programs = []
    for ex in examples:
        try:
            programs.append(parse_program(ex.program))
        except RedkitError as err:
            raise RedkitError(f"record {ex.id} ({ex.question!r}): {err}") from None
    return programs


def evaluate_questions(run: StepsRun, examples: Sequence[Example], compositions: Sequence[str]) -> dict:
    """Exact accuracy of the executed answers per composition, overall and by number of operations
    (the file's programs' when it has them, else the decomposer's), and program exact-match."""
    for ex in examples:
        if len(extract_numbers(ex.question)) < 2:
            raise RedkitError(f"record {ex.id} ({ex.question!r}): fewer than two numbers, nothing to decompose")
    predicted = load_decomposer(run.decomposer_dir).predict([ex.question for ex in examples])
    gold = _gold_programs(examples)
    num_steps = [p.num_steps for p in (gold or predicted)]
    modules, cache = ModuleSet(run), {}
    answers = [ex.answer for ex in examples]
    result = {"n": len(examples),
              "program_exact_match": (sum(render_program(p) == render_program(g) for p, g in zip(predicted, gold)) / len(gold)
                                      if gold else None),
              "compositions": {name: execution_metrics(predicted, answers, NeuralExecutor(run, modules, name, cache), num_steps)
                               for name in compositions}}
    return result


def explain(run: StepsRun, question: str, composition: str = "red") -> tuple[Program, list[StepTrace]]:
    """One question's program and, per step, what the experts were asked, their weights and the value."""
    program = load_decomposer(run.decomposer_dir).predict([question])[0]
    trace: list[StepTrace] = []
    execute_batch([program], NeuralExecutor(run, ModuleSet(run), composition, {}, trace), value_range=None)
    return program, trace
