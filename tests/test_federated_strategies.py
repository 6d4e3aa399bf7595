"""The iterative baselines' server side (redkit/federated/strategies.py): settings refused in one line, the stop
by the owners' val, the round it picks, and a checkpoint resumed only by the same federation."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord  # noqa: E402

from redkit.errors import RedkitError  # noqa: E402
from redkit.federated.strategies import (  # noqa: E402
    STRATEGIES,
    IterativeConfig,
    best_round,
    identity,
    load_checkpoint,
    metered,
    plateau,
    save_checkpoint,
)


@pytest.mark.parametrize(
    "settings, says",
    [
        ({"strategy": "fedsgd"}, "--strategy 'fedsgd' is not one of fedavg, fedprox, fedadam"),
        ({"local_epochs": 0}, "--local-epochs 0"),
        ({"patience": -1}, "--patience -1"),
        ({"lr": 0.0}, "--local-lr 0 must be positive"),
        ({"server_lr": -1.0}, "--server-lr -1"),
    ],
)
def test_a_bad_setting_is_refused_in_one_line(settings, says):
    with pytest.raises(RedkitError, match=says) as err:
        IterativeConfig(**settings)
    assert "\n" not in str(err.value)


def test_each_name_builds_flowers_own_strategy_with_its_settings():
    built = {name: metered(IterativeConfig(strategy=name, proximal_mu=0.5, server_lr=0.03)) for name in STRATEGIES}
    assert [type(s).__mro__[2].__name__ for s in built.values()] == ["FedAvg", "FedProx", "FedAdam"]
    assert built["fedprox"].proximal_mu == 0.5 and built["fedadam"].eta == 0.03 and built["fedadam"].eta_l == 2e-4
    assert dict(IterativeConfig(lr=1e-3, local_epochs=3).train_config()) == {"lr": 1e-3, "local-epochs": 3}


def _ledger(*vals: float) -> list[dict]:
    return [{"round": i + 1, "val_accuracy": v} for i, v in enumerate(vals)]


def test_the_federation_stops_when_val_has_not_risen_for_patience_rounds():
    assert plateau(_ledger(0.5, 0.7, 0.7, 0.6), patience=2) == "val accuracy not above round 2's for 2 rounds"
    assert plateau(_ledger(0.5, 0.7, 0.7), patience=2) is None  # a tie is no rise, but one round only
    assert plateau(_ledger(0.5, 0.7, 0.69, 0.71), patience=2) is None  # it rose again
    assert plateau(_ledger(0.9, 0.1, 0.1, 0.1), patience=0) is None  # patience 0: every round
    assert best_round(_ledger(0.5, 0.7, 0.7, 0.6))["round"] == 2 and best_round([{"round": 1}]) is None


def test_a_checkpoint_is_resumed_only_by_the_federation_that_saved_it(tmp_path):
    config = IterativeConfig(strategy="fedadam")
    strategy = metered(config)
    strategy.m_t, strategy.v_t = {"w": np.full(3, 0.25, np.float32)}, {"w": np.full(3, 0.5, np.float32)}
    arrays = ArrayRecord({"top.w": Array(np.arange(3, dtype=np.float32))})
    save_checkpoint(tmp_path, identity(config, 0), strategy, arrays, _ledger(0.5))
    assert load_checkpoint(tmp_path / "none", identity(config, 0)) is None
    weights, moments, ledger = load_checkpoint(tmp_path, identity(IterativeConfig("fedadam", patience=3), 0))
    assert np.array_equal(weights["top.w"].numpy(), np.arange(3)) and ledger == _ledger(0.5)
    assert set(moments) == {"m_t", "v_t"} and moments["v_t"]["w"].tolist() == [0.5] * 3
    for other in (identity(IterativeConfig("fedadam", lr=1e-3), 0), identity(config, 1)):
        with pytest.raises(RedkitError, match="iterative.safetensors: saved by .* not these settings") as err:
            load_checkpoint(tmp_path, other)
        assert "\n" not in str(err.value)
    # The ledger travels with the weights in one atomic file: a stale iterative.json (a crash between the two
    # writes) cannot pair one round's weights with another's ledger.
    (tmp_path / "iterative.json").write_text('{"config": {}, "ledger": []}')
    assert load_checkpoint(tmp_path, identity(config, 0))[2] == _ledger(0.5)
    # A checkpoint from before that (its tensors without metadata) is read with its iterative.json.
    save_file({"arrays.top.w": np.zeros(3, np.float32)}, str(tmp_path / "iterative.safetensors"))
    (tmp_path / "iterative.json").write_text(json.dumps({"config": identity(config, 0), "ledger": _ledger(0.4)}))
    assert load_checkpoint(tmp_path, identity(config, 0))[2] == _ledger(0.4)
