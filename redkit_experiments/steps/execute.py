"""Neural execution of step programs: each resolved step "What is 56 minus 36?" goes through the
backbone, the router weighs the operation experts, a composition predicts the value, and the value
is substituted into the next step (redkit_experiments.arithmetic.programs.execute_batch runs the rounds)."""

from typing import NamedTuple

import numpy as np
import torch
from sklearn.metrics import f1_score

from redkit.compositions import AlphaNoise, ModuleSet, compose
from redkit.features import encode
from redkit_experiments.arithmetic.expression import OPERATION_NAMES
from redkit_experiments.arithmetic.programs import Call, Program, execute_batch, step_question


class StepTrace(NamedTuple):
    question: str  # the resolved step as the experts were asked it
    weights: list[float] | None  # (K,) expert weights of the composition, where it has any
    value: int


class NeuralExecutor:
    """A batch step function for `execute_batch`, answering with one composition of the run."""

    def __init__(
        self,
        run,
        modules: ModuleSet,
        composition: str,
        cache: dict[str, torch.Tensor],
        trace: list[StepTrace] | None = None,
        alpha_noise: AlphaNoise | None = None,
    ):
        self.run, self.modules, self.composition = run, modules, composition
        self.cache = cache  # question text -> (d,) features, shared by every composition
        self.trace = trace  # when a list, every step answered is appended to it
        self.alpha_noise = alpha_noise  # perturbs the routing of every step (a routing-noise study)

    def features(self, texts: list[str]) -> torch.Tensor:
        missing = sorted({t for t in texts if t not in self.cache})
        if missing:
            for text, h in zip(missing, encode(self.run.backbone, missing, desc="encode steps")):
                self.cache[text] = h
        return torch.stack([self.cache[t] for t in texts]).to(self.run.device)

    def __call__(self, calls: list[Call]) -> list[int]:
        questions = [step_question(a, op, b) for a, op, b in calls]
        h = self.features(questions)  # (N, d)
        # The true operation, used only by the oracle compositions (red_oracle, oracle); a step whose
        # operation has no expert in this run (a * before the plug-in) gets expert 0, never a crash.
        domains = self.run.space.domains
        ops = torch.tensor(
            [domains.index(name) if (name := OPERATION_NAMES[op]) in domains else 0 for _, op, _ in calls],
            device=h.device,
        )
        composed = compose(self.composition, self.modules, h, ops, self.alpha_noise)
        values = self.run.space.value_of(composed.probs.argmax(dim=-1).cpu()).tolist()
        if self.trace is not None:
            weights = composed.weights.cpu().tolist() if composed.weights is not None else [None] * len(calls)
            self.trace += [StepTrace(q, w, v) for q, w, v in zip(questions, weights, values)]
        return values


def execution_metrics(
    programs: list[Program], answers: list[int], executor: NeuralExecutor, num_steps: list[int] | None = None
) -> dict:
    """Exact accuracy and macro-F1 of the final answers, overall and by number of steps (the
    programs' own, or `num_steps` when the true counts are known and the programs are predicted)."""
    predicted = np.array([run.answer for run in execute_batch(programs, executor, value_range=None)])
    true = np.array(answers)
    steps = np.array(num_steps if num_steps is not None else [p.num_steps for p in programs])

    def scores(rows: np.ndarray) -> dict:
        t, p = true[rows], predicted[rows]
        return {
            "n": int(rows.sum()),
            "accuracy": float((p == t).mean()),
            "macro_f1": float(f1_score(t, p, labels=np.unique(t), average="macro", zero_division=0)),
        }

    out = {"all": scores(np.ones_like(steps, dtype=bool))}
    for k in sorted(set(steps.tolist())):
        out[f"{k}-step"] = scores(steps == k)
    return out
