"""Routing noise on a steps run, where it hits every executed step: a step answered through
perturbed weights may give a wrong value, which the next step then takes as its operand."""

from collections.abc import Callable

from redkit.compositions import AlphaNoise, ModuleSet
from redkit_experiments.arithmetic.programs import parse_program
from redkit_experiments.decomposer.train import decomposer_data
from redkit_experiments.steps.execute import NeuralExecutor, execution_metrics
from redkit_experiments.steps.run import StepsRun


def executed_accuracy(run: StepsRun, modules: ModuleSet) -> tuple[Callable[[str, AlphaNoise], float], int]:
    """`accuracy(name, alpha_of)` of the final answers of the decomposer data's test programs
    (gold programs: only the routing is wrong), and how many programs that is."""
    test = decomposer_data(run.config.decomposer)["test"]
    programs, answers = [parse_program(ex.program) for ex in test], [ex.answer for ex in test]
    cache = (
        run.step_features()
    )  # question -> features, shared by every draw (a wrong value may need a new step encoded)

    def accuracy(name: str, alpha_of: AlphaNoise) -> float:
        executor = NeuralExecutor(run, modules, name, cache, alpha_noise=alpha_of)
        return execution_metrics(programs, answers, executor)["all"]["accuracy"]

    return accuracy, len(programs)
