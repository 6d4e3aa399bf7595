"""Independent training chains in forked processes (redkit/train/parallel.py): lines and timings come
back to the parent, an error in a child is raised in the parent, and sequential where forking is off."""

import os
from types import SimpleNamespace

import pytest
import torch

from redkit.errors import RedkitError
from redkit.train import parallel


def _run() -> SimpleNamespace:
    run = SimpleNamespace(timings={"base": 1.0}, device=torch.device("cpu"))
    run.add_time = lambda stage, seconds: run.timings.__setitem__(stage, run.timings.get(stage, 0.0) + seconds)
    return run


def _step(run, stage: str, seconds: float):
    def step() -> str:
        run.add_time(stage, seconds)
        return f"[{stage}] pid {os.getpid()}"

    return step


@pytest.mark.parametrize("forked", [True, False])
def test_chains_print_their_lines_in_order_and_their_seconds_reach_the_parent(monkeypatch, forked):
    monkeypatch.setattr(parallel, "forks_help", lambda run: forked)
    run, printed = _run(), []
    parallel.run_chains(
        run, [[_step(run, "experts", 2.0), _step(run, "router", 0.5)], [_step(run, "gate", 3.0)], []], printed.append
    )
    assert [line.split()[0] for line in printed] == ["[experts]", "[router]", "[gate]"]
    assert run.timings == {"base": 1.0, "experts": 2.0, "router": 0.5, "gate": 3.0}
    pids = {line.split()[-1] for line in printed}
    assert (str(os.getpid()) not in pids and len(pids) == 2) if forked else pids == {str(os.getpid())}


def test_an_error_in_a_forked_chain_is_raised_in_the_parent_after_the_others_finish(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "forks_help", lambda run: True)
    run, done = _run(), tmp_path / "done"

    def fails() -> str:
        raise RedkitError("modules/router: missing; run stage experts first")

    with pytest.raises(RedkitError, match="modules/router: missing"):
        parallel.run_chains(run, [[fails], [lambda: done.write_text("x") and "[gate] done"]], lambda line: None)
    assert done.read_text() == "x" and run.timings == {"base": 1.0}


def test_a_chain_killed_before_it_answers_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(parallel, "forks_help", lambda run: True)
    with pytest.raises(RedkitError, match="ended with exit code -9 before it finished"):
        parallel.run_chains(_run(), [[lambda: os.kill(os.getpid(), 9)], [lambda: "[gate] done"]], lambda line: None)


def test_no_forks_on_a_cuda_device_or_one_core(monkeypatch):
    assert not parallel.forks_help(SimpleNamespace(device=torch.device("cuda")))
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 1)
    assert not parallel.forks_help(SimpleNamespace(device=torch.device("cpu")))
