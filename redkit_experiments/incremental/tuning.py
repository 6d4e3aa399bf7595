"""`redkit study incremental-tune`: the fine-tuning strategies' hyperparameters, chosen on a tuning stream that is
not the evaluated one, never on test.

    tuning stream   the first `steps` steps of an order no result reports (CLINC150's domains protocol: order 3,
                    three domains), each strategy scored on the val queries of every step seen after the last one
                    (the evaluated streams are scored on test; their val is each step's own early stopping)
    search          per strategy, coordinate-wise: its learning rate from LRS at the papers' other values, then
                    each of its own hyperparameters (EWC's λ then γ, LwF's α, DER++'s α then β) over its grid, the
                    others at their best so far; every step trains up to EPOCHS epochs, early-stopped on the
                    step's val (PATIENCE)
    output          <out>/tuned.json: every candidate's score, the chosen values, the command and the commit;
                    `--save` also writes it to redkit_experiments/incremental/tuned.json, which every study reads

The choice is by final accuracy on the tuning stream's val, ties to the candidate tried first (the papers' value).
"""

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from redkit.atomic import write_json
from redkit.provenance import git_commit, provenance
from redkit_experiments.incremental.hyperparameters import DEFAULTS, TUNED
from redkit_experiments.incremental.study import IncrementalConfig, StudyContext, run_method

STRATEGIES = ("finetune", "ewc", "lwf", "er_200", "er_1000", "derpp_1000")
LRS = (1e-4, 2e-4, 5e-4)
EPOCHS, PATIENCE = 10, 2
OWN = {  # each strategy's own hyperparameters and their grids (the paper's value first)
    "ewc": {"lambda": (1e5, 1e3, 1e4, 1e6), "gamma": (1.0, 0.9)},
    "lwf": {"alpha": (1.0, 0.5, 2.0)},
    "derpp_1000": {"alpha": (0.1, 0.3, 1.0), "beta": (0.5, 1.0)},
}


@dataclass
class IncrementalTuningConfig:
    data_dir: str = "data/clinc150"
    protocol: str = "domains"
    order: int = 3  # an order no reported result uses (0, 1, 2 are)
    steps: int = 3
    classes_per_task: int = 10
    strategies: tuple[str, ...] = STRATEGIES
    lrs: tuple[float, ...] = LRS
    epochs: int = EPOCHS
    patience: int = PATIENCE
    seed: int = 0
    device: str = "cpu"
    own: dict = field(default_factory=lambda: {k: dict(v) for k, v in OWN.items()})

    def study(self) -> IncrementalConfig:
        return IncrementalConfig(
            data_dir=self.data_dir,
            protocol=self.protocol,
            order=self.order,
            classes_per_task=self.classes_per_task,
            seed=self.seed,
            device=self.device,
            first_steps=self.steps,
            scored_on="val",
            joint_steps="last",
        )


def stages(config: IncrementalTuningConfig, name: str) -> list[tuple[str, tuple]]:
    """(hyperparameter, its grid) in the order they are searched: the rate, then the strategy's own."""
    return [("lr", config.lrs), *config.own.get(name, {}).items()]


def command_of(config: IncrementalTuningConfig, out: Path, save: bool) -> str:
    """The command line that runs this search again."""
    words = ["redkit", "study", "incremental-tune", "--data", config.data_dir, "--out", str(out)]
    words += ["--protocol", config.protocol, "--order", str(config.order), "--steps", str(config.steps)]
    words += ["--classes-per-task", str(config.classes_per_task), "--epochs", str(config.epochs)]
    words += ["--seed", str(config.seed)]
    words += [w for name in config.strategies for w in ("--method", name)]
    words += [w for lr in config.lrs for w in ("--lr", f"{lr:g}")] + (["--save"] if save else [])
    return " ".join(shlex.quote(w) for w in words)


def run_incremental_tuning(config: IncrementalTuningConfig, out: Path, save: bool = False, print_fn=print) -> dict:
    out = Path(out)
    context = StudyContext(config.study(), out)  # the stream's features, cached once under <out>/cache
    defaults = {group: dict(values) for group, values in DEFAULTS.items()}
    search, chosen = [], {}
    for name in config.strategies:
        # coordinate-wise: each hyperparameter over its grid with the others at their best so far (the papers'
        # values, first in each grid, before their turn)
        best = {"epochs": config.epochs, "patience": config.patience}
        best |= {key: grid[0] for key, grid in stages(config, name)}
        scored: dict[str, float] = {}
        for key, grid in stages(config, name):
            for value in grid:
                values = best | {key: value}
                tag = json.dumps(values, sort_keys=True)
                if tag not in scored:
                    context.config.hyperparameters = defaults | {name: defaults.get(name, {}) | values}
                    start = time.perf_counter()
                    accuracy = run_method(name, context)["final_accuracy"]
                    scored[tag] = accuracy
                    row = {"method": name, "values": values, "final_accuracy": accuracy}
                    search.append(row | {"seconds": time.perf_counter() - start})
                    print_fn(f"[{name}] {values} -> {accuracy:.4f} ({search[-1]['seconds']:.0f} s)")
            best = max(
                (best | {key: value} for value in grid), key=lambda v: scored[json.dumps(v, sort_keys=True)]
            )  # ties: the first in the grid
        chosen[name] = best
    tuned = {
        "command": command_of(config, out, save),
        "commit": git_commit(),
        "stream": {"protocol": config.protocol, "order": config.order, "steps": [s.name for s in context.stream.steps]},
        "scored_on": "val of every step of the tuning stream, after its last step",
        "config": {k: v for k, v in vars(config).items()},
        "search": search,
        "chosen": chosen,
        "provenance": provenance(),
    }
    write_json(out / "tuned.json", tuned)
    if save:
        write_json(TUNED, tuned)
    for name in config.strategies:
        print_fn(f"{name}: {chosen[name]}")
    return tuned
