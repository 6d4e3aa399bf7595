"""The training loop: early stopping, and a run killed mid-way resumes to exactly the same result."""

import pytest
import torch
from torch.nn import functional as F

from redkit.modules import Router
from redkit.train.loop import Checkpoint, TrainConfig, fit


def _problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return x, y


def _train(tmp_path, max_epochs, interrupt_at=None):
    x, y = _problem()
    torch.manual_seed(0)
    model = Router(Router.Config(dim=8, num_experts=3, hidden=16))

    def log(row):
        if interrupt_at is not None and row["epoch"] == interrupt_at:
            raise KeyboardInterrupt  # a kill right after the checkpoint of this epoch

    result = fit(
        model,
        lambda idx: F.cross_entropy(model(x[idx]), y[idx]),
        len(x),
        lambda: F.cross_entropy(model(x), y).item(),
        TrainConfig(lr=1e-2, max_epochs=max_epochs, patience=100),
        seed=7,
        checkpoint_dir=tmp_path,
        log=log,
    )
    return model, result


@pytest.mark.slow
def test_interrupted_training_resumes_to_the_same_weights(tmp_path):
    straight, result = _train(tmp_path / "a", max_epochs=6)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "b", max_epochs=6, interrupt_at=3)
    assert Checkpoint(tmp_path / "b").exists()
    resumed, resumed_result = _train(tmp_path / "b", max_epochs=6)
    assert resumed_result.resumed_from == 3 and resumed_result.epochs == 6
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(p, q)
    assert [r["val_loss"] for r in result.history] == [r["val_loss"] for r in resumed_result.history]


@pytest.mark.slow
def test_a_kill_between_the_checkpoint_files_resumes_the_epoch_the_weights_hold(tmp_path):
    """checkpoint.json one epoch behind checkpoint.safetensors (a kill between the two writes): the
    resumed run follows the tensors file's own progress and still ends as an uninterrupted run."""
    straight, _ = _train(tmp_path / "a", max_epochs=6)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "b", max_epochs=6, interrupt_at=2)
    stale = (tmp_path / "b" / "checkpoint.json").read_text()
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "b", max_epochs=6, interrupt_at=3)
    (tmp_path / "b" / "checkpoint.json").write_text(stale)
    resumed, result = _train(tmp_path / "b", max_epochs=6)
    assert result.resumed_from == 3
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


@pytest.mark.slow
def test_early_stopping_keeps_the_best_epoch(tmp_path):
    x, y = _problem()
    model = Router(Router.Config(dim=8, num_experts=3, hidden=16))
    losses = iter([1.0, 0.5, 0.7, 0.8, 0.9, 0.1])
    result = fit(
        model,
        lambda idx: F.cross_entropy(model(x[idx]), y[idx]),
        len(x),
        lambda: next(losses),
        TrainConfig(lr=1e-3, max_epochs=60, patience=3),
        seed=0,
    )
    assert result.epochs == 5 and result.best_epoch == 2 and result.best_val_loss == 0.5
