"""Neural execution of step programs: each resolved step "What is 56 minus 36?" goes through the
backbone, the router weighs the operation experts, a composition predicts the value, and the value
is substituted into the next step (redkit.programs.execute_batch runs the rounds)."""

import numpy as np
import torch
from sklearn.metrics import f1_score

from redkit.compositions import ModuleSet, compose
from redkit.data.expression import OPERATION_NAMES
from redkit.data.vocabulary import answer_to_class, class_to_answer
from redkit.features import encode
from redkit.programs import Call, Program, execute_batch, step_question
from redkit.steps.run import StepsRun


class NeuralExecutor:
    """A batch step function for `execute_batch`, answering with one composition of the run."""

    def __init__(self, run: StepsRun, modules: ModuleSet, composition: str, cache: dict[str, torch.Tensor]):
        self.run, self.modules, self.composition = run, modules, composition
        self.cache = cache  # question text -> (d,) features, shared by every composition

    def features(self, texts: list[str]) -> torch.Tensor:
        missing = sorted({t for t in texts if t not in self.cache})
        if missing:
            for text, h in zip(missing, encode(self.run.backbone, missing, desc="encode steps")):
                self.cache[text] = h
        return torch.stack([self.cache[t] for t in texts]).to(self.run.device)

    def __call__(self, calls: list[Call]) -> list[int]:
        h = self.features([step_question(a, op, b) for a, op, b in calls])  # (N, d)
        # The true operation, used only by the oracle compositions (red_oracle, oracle).
        ops = torch.tensor([self.run.space.domains.index(OPERATION_NAMES[op]) for _, op, _ in calls], device=h.device)
        composed = compose(self.composition, self.modules, h, ops)
        return [class_to_answer(int(c)) for c in composed.probs.argmax(dim=-1).cpu()]


def execution_metrics(programs: list[Program], answers: list[int], executor: NeuralExecutor) -> dict:
    """Exact accuracy and macro-F1 of the final answers, overall and by number of steps."""
    predicted = np.array([run.answer for run in execute_batch(programs, executor, value_range=None)])
    true = np.array(answers)
    steps = np.array([p.num_steps for p in programs])

    def scores(rows: np.ndarray) -> dict:
        t, p = true[rows], predicted[rows]
        in_vocab = np.clip(p, 2, 100)  # a value outside the vocabulary is simply wrong
        return {"n": int(rows.sum()), "accuracy": float((p == t).mean()),
                "macro_f1": float(f1_score([answer_to_class(x) for x in t], [answer_to_class(x) for x in in_vocab],
                                           labels=sorted({answer_to_class(x) for x in t}), average="macro", zero_division=0))}

    out = {"all": scores(np.ones_like(steps, dtype=bool))}
    for k in sorted(set(steps.tolist())):
        out[f"{k}-step"] = scores(steps == k)
    return out
