"""The iterative baselines' server side: Flower's own strategies (FedAvg, FedProx, FedAdam), unchanged, each
wrapped by `Metered` to count what it exchanges, name each round's owners, save the federation after every round
(a crashed run resumes at the next one) and stop once the owners' validation accuracy stops rising.

    round t   configure_train ─► each owner: E local epochs from w_t (fedavg.py; FedProx adds its proximal term)
              aggregate_train ◄─ the weights and example counts: w_t+1 by the strategy's rule
              configure_evaluate ─► each owner scores w_t+1 on its own val split
              aggregate_evaluate ◄─ accuracy and count: Flower's weighted mean = the accuracy on every owner's val
                                    pooled, without any val example leaving its owner (what picks the round)
              the experimenter's test accuracy of w_t+1; the checkpoint; stop if `patience` rounds passed
              without a better val accuracy, or at `rounds`

A resumed federation numbers its rounds on: the round number reaches every owner (its local seed) and FedAdam's
bias correction, so a run stopped at round k and resumed gives the uninterrupted run's numbers.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import FedAdam, FedAvg, FedProx
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from redkit.atomic import atomic_path, write_json
from redkit.errors import RedkitError
from redkit.federated.message_bytes import content_bytes
from redkit.jsonfile import read_json


@dataclass
class IterativeConfig:
    strategy: str = "fedavg"  # STRATEGIES (the rounds, at most: Settings.rounds, `redkit federate --rounds`)
    lr: float = 2e-4  # each owner's AdamW rate (FedAdam's eta_l)
    local_epochs: int = 1  # E
    proximal_mu: float = 0.01  # FedProx's mu (the others ignore it)
    server_lr: float = 1e-2  # FedAdam's eta (the others ignore it); Flower's beta_1 0.9, beta_2 0.99, tau 1e-3
    patience: int = 0  # stop after this many rounds without a better val accuracy (0: every one of `rounds`)

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise RedkitError(f"--strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        if self.local_epochs < 1 or self.patience < 0:
            raise RedkitError(f"--local-epochs {self.local_epochs} / --patience {self.patience}: at least 1 / 0")
        for name, flag in (("lr", "--local-lr"), ("proximal_mu", "--proximal-mu"), ("server_lr", "--server-lr")):
            if not getattr(self, name) > 0:
                raise RedkitError(f"{flag} {getattr(self, name):g} must be positive")

    def train_config(self) -> ConfigRecord:
        """What every owner reads of a round's settings (FedProx's strategy adds "proximal-mu" itself)."""
        return ConfigRecord({"lr": self.lr, "local-epochs": self.local_epochs})

    def label(self) -> str:
        """e.g. "fedavg lr 0.0002 E 1"."""
        extra = {"fedprox": f" mu {self.proximal_mu:g}", "fedadam": f" eta {self.server_lr:g}"}.get(self.strategy, "")
        return f"{self.strategy} lr {self.lr:g} E {self.local_epochs}{extra}"


STRATEGIES: dict[str, Callable[[IterativeConfig], tuple[type, dict]]] = {}


def register(name: str):
    def add(build):
        STRATEGIES[name] = build
        return build

    return add


@register("fedavg")
def fedavg(config: IterativeConfig) -> tuple[type, dict]:
    return FedAvg, {}


@register("fedprox")
def fedprox(config: IterativeConfig) -> tuple[type, dict]:
    return FedProx, {"proximal_mu": config.proximal_mu}


@register("fedadam")
def fedadam(config: IterativeConfig) -> tuple[type, dict]:
    return FedAdam, {"eta": config.server_lr, "eta_l": config.lr}


class Plateau(Exception):  # noqa: N818 (a stop, not an error)
    """The owners' val accuracy has not risen for `patience` rounds: the federation stops."""


class Metered:
    """Mixed in before one of Flower's strategies (`metered`): its four round methods see the round numbered on
    from a resumed run's, and record in `ledger` each round's bytes each way, owners answering and missing."""

    def setup(self, ledger: list[dict], names: dict[int, str], round_timeout: float, done: int, failure):
        self.ledger, self.names, self.round_timeout, self.done, self.failure = (
            ledger,
            names,
            round_timeout,
            done,
            failure,
        )
        self.start_time = time.perf_counter() - (ledger[-1]["seconds"] if ledger else 0.0)
        self.not_training = 0.0  # seconds spent on the experimenter's evaluations (not the method's cost)
        self.sent: list = []  # this round's messages (sending gives each its id)
        self.trained: set[int] = set()  # the nodes whose training this round came back

    def name(self, node: int) -> str:
        return self.names.get(node, f"node {node}")

    def replies_of(self, replies) -> tuple[list, dict[str, str]]:
        """(the replies without error, {owner: why it is missing}) of this round's `self.sent`."""
        replies = list(replies)
        node_of = {m.metadata.message_id: m.metadata.dst_node_id for m in self.sent}
        answered = {node_of.get(r.metadata.reply_to_message_id): r for r in replies}
        for node, reply in answered.items():  # an owner's name, given in its reply (no RED round needed before)
            if not reply.has_error() and "owner" in reply.content.config_records:
                self.names[node] = str(reply.content["owner"]["owner"])
        missing = {self.name(n): self.failure(r) for n, r in answered.items() if r.has_error()}
        for m in self.sent:
            if m.metadata.dst_node_id not in answered:
                missing[self.name(m.metadata.dst_node_id)] = f"no reply within {self.round_timeout:.0f} s"
        return replies, dict(sorted(missing.items()))

    def configure_train(self, server_round, arrays, config, grid):
        self.dtypes = {k: a.numpy().dtype for k, a in arrays.items()}
        self.sent = list(super().configure_train(server_round + self.done, arrays, config, grid))
        self.ledger.append(
            {"round": server_round + self.done, "bytes_down": sum(content_bytes(m.content) for m in self.sent)}
        )
        return self.sent

    def aggregate_train(self, server_round, replies):
        replies, missing = self.replies_of(replies)
        entry = self.ledger[-1]
        entry["bytes_up"] = sum(content_bytes(r.content) for r in replies if not r.has_error())
        entry["owners"] = sorted(self.names.get(r.metadata.src_node_id, "?") for r in replies if not r.has_error())
        entry["missing"] = missing
        self.trained = {r.metadata.src_node_id for r in replies if not r.has_error()}
        arrays, metrics = super().aggregate_train(server_round + self.done, replies)
        if arrays is not None:  # FedAdam steps in float64: the weights go on in the model's own type (float32)
            arrays = ArrayRecord({k: Array(a.numpy().astype(self.dtypes[k], copy=False)) for k, a in arrays.items()})
        entry["seconds"] = time.perf_counter() - self.start_time - self.not_training  # rounds so far
        return arrays, metrics

    def configure_evaluate(self, server_round, arrays, config, grid):
        # Only the owners who trained this round: one that died in it would hold the evaluation for a timeout more.
        sent = super().configure_evaluate(server_round + self.done, arrays, config, grid)
        self.sent = [m for m in sent if m.metadata.dst_node_id in self.trained]
        self.ledger[-1]["eval_bytes_down"] = sum(content_bytes(m.content) for m in self.sent)
        return self.sent

    def aggregate_evaluate(self, server_round, replies):
        replies, missing = self.replies_of(replies)
        metrics = super().aggregate_evaluate(server_round + self.done, replies)
        entry = self.ledger[-1]
        entry["eval_bytes_up"] = sum(content_bytes(r.content) for r in replies if not r.has_error())
        if metrics is not None:
            entry["val_accuracy"] = float(metrics["accuracy"])
            entry["val_examples"] = sum(int(r.content["metrics"]["num-examples"]) for r in replies if not r.has_error())
        if missing:
            entry["eval_missing"] = missing
        return metrics


def metered(config: IterativeConfig, **kwargs) -> Metered:
    """Flower's strategy `config.strategy` with Metered mixed in (call `setup` before `start`)."""
    cls, options = STRATEGIES[config.strategy](config)
    return type(f"Metered{cls.__name__}", (Metered, cls), {})(**options, **kwargs)


# ---- after every round: what a crashed run resumes from ---------------------------------------------------------


def save_checkpoint(directory: Path, config: dict, strategy, arrays: ArrayRecord, ledger: list[dict]) -> None:
    """DIR/iterative.safetensors: the global weights, FedAdam's moments m_t and v_t, and (its metadata) the settings
    and the ledger so far, in one file written atomically: a crash leaves the last round's whole or the one before
    it, never the weights of one round with the ledger of another. DIR/iterative.json: the same settings and ledger
    for a reader."""
    tensors = {f"arrays.{k}": a.numpy() for k, a in arrays.items()}
    for moment in ("m_t", "v_t"):
        tensors |= {f"{moment}.{k}": v for k, v in (getattr(strategy, moment, None) or {}).items()}
    directory.mkdir(parents=True, exist_ok=True)
    saved = {"config": config, "ledger": ledger}
    with atomic_path(directory / "iterative.safetensors") as tmp:
        tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
        save_file(tensors, str(tmp), metadata={k: json.dumps(v) for k, v in saved.items()})
    write_json(directory / "iterative.json", saved)


def load_checkpoint(directory: Path, config: dict) -> tuple[ArrayRecord, dict, list[dict]] | None:
    """(the global weights, FedAdam's moments, the ledger) a run with the same settings saved; None if none was
    saved; a run with other settings is refused in one line (its ledger would mix two federations)."""
    path = directory / "iterative.safetensors"
    if not path.is_file():
        return None
    with safe_open(str(path), "np") as f:
        metadata = f.metadata() or {}
    if "ledger" in metadata:
        saved = {k: json.loads(metadata[k]) for k in ("config", "ledger")}
    else:  # saved before the ledger went into the tensors' file
        saved = read_json(directory / "iterative.json", "the iterative baseline's checkpoint")
    if saved["config"] != config:
        raise RedkitError(
            f"{path}: saved by {saved['config']}, not these settings; give another --out, or delete it to start again"
        )
    tensors = load_file(str(path))
    arrays = ArrayRecord({k[7:]: Array(v) for k, v in tensors.items() if k.startswith("arrays.")})
    moments = {m: {k[len(m) + 1 :]: v for k, v in tensors.items() if k.startswith(f"{m}.")} for m in ("m_t", "v_t")}
    return arrays, {m: v for m, v in moments.items() if v}, saved["ledger"]


def identity(config: IterativeConfig, seed: int) -> dict:
    """What makes one federation's rounds (a checkpoint is resumed only by the same): the settings and the seed,
    not `patience` (nor the rounds, which are not here: more of them may resume it)."""
    return {k: v for k, v in vars(config).items() if k != "patience"} | {"seed": seed}


def plateau(ledger: list[dict], patience: int) -> str | None:
    """Why the federation stops after the ledger's last round (`patience` rounds and none with a better val
    accuracy than the best before them), or None: it goes on. Patience 0 never stops it."""
    best = best_round(ledger)
    if patience and best and ledger[-1]["round"] - best["round"] >= patience:
        return f"val accuracy not above round {best['round']}'s for {patience} rounds"
    return None


def best_round(ledger: list[dict]) -> dict | None:
    """The round with the best val accuracy (the first of ties), None if no round was scored on val."""
    scored = [r for r in ledger if "val_accuracy" in r]
    return max(scored, key=lambda r: (r["val_accuracy"], -r["round"])) if scored else None
