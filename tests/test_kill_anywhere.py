"""Kill anywhere: `redkit reproduce task1` (tiny) SIGKILLed at random moments in every stage, rerun
each time, and finally run to completion, ends with the results and module weights of an
uninterrupted run, to the bit.

Which stage a kill hit is read from the run directory afterwards (the first stage whose modules are
incomplete; `evaluate` once they all exist and results.json does not). Kills per stage are printed
(`pytest tests/test_kill_anywhere.py -s`)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a dozen killed and resumed runs

RANGES = ("R1", "R2", "R3", "R4", "R5")
STAGE_MODULES = {
    "base": ["classifier", "backbone_top"],
    "experts": [f"experts/{kind}/{r}" for kind in ("residual", "logit") for r in RANGES],
    "heads": [f"heads/{r}" for r in RANGES] + ["heads/global_full"],
    "router": ["router"],
    "gate": ["gate"],
}
STAGES = (*STAGE_MODULES, "evaluate")
ARGS = ("reproduce", "task1", "--n", "400", "--max-epochs", "3")
KILLS_PER_STAGE = 1  # at least; 6 stages, so at least 6 kills
MAX_ATTEMPTS = 20


def current_stage(run: Path) -> str:
    """The stage a run directory is in: the first with an incomplete module, else evaluate, else done."""
    for stage, modules in STAGE_MODULES.items():
        if not all((run / "modules" / m / "config.json").is_file() for m in modules):
            return stage
    return "done" if (run / "results.json").is_file() else "evaluate"


def reached(run: Path, target: str) -> bool:
    """Whether the run is in stage `target` or past it (stage base: once its data is written)."""
    stage = current_stage(run)
    if stage == "base" == target:
        return (run / "data" / "splits.json").is_file()
    return stage == "done" or STAGES.index(stage) >= STAGES.index(target)


def start(run: Path) -> subprocess.Popen:
    env = dict(os.environ, TQDM_DISABLE="1")
    return subprocess.Popen(
        [sys.executable, "-m", "redkit.cli", *ARGS, "--out", str(run)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def modules_bytes(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted((run / "modules").rglob("model.safetensors"))}


def metrics(run: Path) -> dict:
    results = json.loads((run / "results.json").read_text())
    return {key: results[key] for key in ("splits", "router", "gate")}


def kill_in(process: subprocess.Popen, run: Path, target: str, rng: random.Random) -> None:
    """Let the process run in random slices of 0.5-5 ms, stopped (SIGSTOP) between them while the
    run directory is read; once it is in stage `target`, kill it after each slice with probability
    1/3: a random moment within the stage, even one that lasts a few milliseconds."""
    while process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)
        time.sleep(rng.uniform(0.0005, 0.005))
        os.kill(process.pid, signal.SIGSTOP)
        if reached(run, target) and rng.random() < 1 / 3:
            break
    process.kill()  # SIGKILL, also to a stopped process
    process.wait()


def test_killed_anywhere_ends_as_an_uninterrupted_run(tmp_path):
    reference = tmp_path / "reference"
    done = start(reference)  # alongside the killed runs: they run in slices of milliseconds, stopped in between
    rng = random.Random(13)
    run, kills, attempts = tmp_path / "killed", Counter(), 0
    while min(kills[s] for s in STAGES) < KILLS_PER_STAGE and attempts < MAX_ATTEMPTS:
        attempts += 1
        target = min(STAGES, key=lambda s: (kills[s], STAGES.index(s)))  # the least-killed stage next
        kill_in(start(run), run, target, rng)
        hit = current_stage(run)
        if hit == "done":  # it finished before the kill: start again from nothing, kills so far stay counted
            for path in sorted(run.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
        else:
            kills[hit] += 1
    print(f"kills per stage: {dict(kills)} in {attempts} attempts")
    assert done.wait() == 0, done.stderr.read()
    finish = start(run)
    assert finish.wait() == 0, finish.stderr.read()
    assert sum(kills.values()) >= 5 and all(kills[s] >= KILLS_PER_STAGE for s in STAGES), dict(kills)
    assert metrics(run) == metrics(reference)
    killed, uninterrupted = modules_bytes(run), modules_bytes(reference)
    assert killed.keys() == uninterrupted.keys() and len(killed) >= 19
    assert [name for name in killed if killed[name] != uninterrupted[name]] == []
