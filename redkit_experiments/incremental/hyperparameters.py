"""The fine-tuning strategies' hyperparameters: their papers' values until the tuning stream (tuning.py) has
chosen them; the choice is written to tuned.json beside this file, with the command and search that made it,
and every study reads it from there.

    step     every strategy's training of one step: learning rate, the most epochs, early stopping
    ewc      λ, the penalty's weight; γ, the decay of earlier steps' Fisher (online EWC)
    lwf      α, the distillation's weight; T, its temperature
    derpp    α, the stored logits' weight; β, the replayed labels'
"""

import json
from pathlib import Path

TUNED = Path(__file__).with_name("tuned.json")

# The methods that read these hyperparameters (IncrementalConfig.step_training and .hyper): every other method
# gives the same figures whatever they are. A trailing "_" is a family (er_200, er_1000, derpp_1000).
STRATEGIES = ("finetune", "ewc", "lwf", "er_", "derpp_")


def reads_hyperparameters(name: str) -> bool:
    return any(name == s or (s.endswith("_") and name.startswith(s)) for s in STRATEGIES)


DEFAULTS: dict[str, dict[str, float]] = {
    # the fit recipe's rate; 3 epochs, the last kept (no early stopping: `patience` 0)
    "step": {"lr": 2e-4, "epochs": 3, "patience": 0},
    "ewc": {"lambda": 1e5, "gamma": 1.0},  # Kirkpatrick's sum (γ = 1); λ from the penalty's magnitude
    "lwf": {"alpha": 1.0, "temperature": 2.0},  # Li & Hoiem's
    "derpp": {"alpha": 0.1, "beta": 0.5},  # Avalanche's defaults
}


def tuned_hyperparameters(path: Path = TUNED) -> dict[str, dict[str, float]]:
    """DEFAULTS, with what the tuning stream chose where it has run (tuned.json's "chosen")."""
    chosen = json.loads(path.read_text())["chosen"] if path.is_file() else {}
    return {group: values | chosen.get(group, {}) for group, values in DEFAULTS.items()} | {
        group: values for group, values in chosen.items() if group not in DEFAULTS
    }
