"""The iterative baseline's rounds on the server (`iterative_rounds`): Flower's strategy (strategies.py) started
on the owners connected, from the last round saved, with the experimenter's test accuracy and the checkpoint after
each round, until the owners' val stops rising or the rounds run out. flower_app.server_main calls it after RED's
round."""

import time
from pathlib import Path

from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp import Grid

from redkit.federated.message_bytes import failure
from redkit.federated.settings import Settings
from redkit.federated.strategies import (
    IterativeConfig,
    Plateau,
    identity,
    load_checkpoint,
    metered,
    plateau,
    save_checkpoint,
)
from redkit.fitting.records import Fields, LabelReader, read_records


def iterative_rounds(grid: Grid, settings: Settings, ledger: list[dict], names: dict[int, str], print_fn=print) -> dict:
    """Up to `settings.rounds` rounds of the iterative baseline (strategies.py: Flower's FedAvg, FedProx or
    FedAdam), each owner scoring the new weights on its val after each round and the experimenter on the test
    file; from the last round saved if an earlier run stopped (RUN/federation/iterative.*). Each round trains on
    every owner connected when it starts and waits `round_timeout` for them at most: an owner that dies in a round
    leaves it to the others (Flower's `min_*_nodes` of every owner would wait for it). Returns why it stopped."""
    from redkit.federated.fedavg import FedAvgConfig, FineTune  # torch: only where the baseline runs
    from redkit.federated.plan import FederationPlan

    plan, config = FederationPlan.from_json(settings.plan), IterativeConfig(**settings.iterative)
    run = Path(settings.run_dir)
    model = FineTune(FedAvgConfig(seed=plan.seed), tuple(settings.labels))
    test = read_records(Path(settings.test), Fields(), LabelReader()) if settings.test else []
    cache, key = run / "fedavg-cache", identity(config, plan.seed)
    arrays, moments = ArrayRecord(model.state()), {}
    if saved := load_checkpoint(run / "federation", key):
        arrays, moments, done = saved
        ledger[:] = done
        print_fn(f"{config.label()}: resumed after round {len(done)}")
    if len(ledger) >= settings.rounds or plateau(ledger, config.patience):  # a finished run: nothing to do
        return {"stopped": plateau(ledger, config.patience) or f"{len(ledger)} rounds"}

    def evaluate(server_round: int, weights: ArrayRecord) -> MetricRecord | None:
        """After each round: the experimenter's test accuracy, the checkpoint, and the stop by val."""
        if server_round == 0:
            return None
        t = time.perf_counter()
        entry = ledger[-1]
        if test:
            model.load(weights.to_torch_state_dict())
            entry["accuracy"] = model.accuracy([r.question for r in test], [r.answer for r in test], cache)
        strategy.not_training += time.perf_counter() - t
        save_checkpoint(run / "federation", key, strategy, weights, ledger)
        figures = {k: f"{entry[k]:.4f}" for k in ("val_accuracy", "accuracy") if k in entry}
        print_fn(f"{config.label()}, round {entry['round']}: {figures}")
        if why := plateau(ledger, config.patience):
            raise Plateau(why)
        return MetricRecord({k: float(entry[k]) for k in ("accuracy", "val_accuracy") if k in entry})

    strategy = metered(
        config,
        fraction_train=1.0,
        fraction_evaluate=1.0,
        min_train_nodes=1,
        min_evaluate_nodes=1,
        min_available_nodes=1,
    )
    strategy.setup(ledger, names, settings.round_timeout, len(ledger), failure)
    for moment, values in moments.items():
        setattr(strategy, moment, values)
    try:
        strategy.start(
            grid=grid,
            initial_arrays=arrays,
            num_rounds=settings.rounds - len(ledger),
            timeout=settings.round_timeout,
            train_config=config.train_config(),
            evaluate_fn=evaluate,
        )
    except Plateau as stop:
        return {"stopped": str(stop)}
    return {"stopped": f"{settings.rounds} rounds"}
