"""Experts trained in separate processes, one under bf16 autocast and the others in fp32, load and
compose in one run; each module's metrics say which precision it was trained in."""

import json
import os
import shutil
import subprocess
import sys

from conftest import run_cli

RESIDUAL = ("modules", "experts", "residual")


def test_bf16_and_fp32_experts_from_separate_processes_compose(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    shutil.rmtree(run.joinpath(*RESIDUAL))
    env = dict(os.environ, TQDM_DISABLE="1")
    train = [sys.executable, "-m", "redkit.cli", "train", "experts", "--run", str(run), "--kind", "residual"]
    jobs = [
        subprocess.Popen(train + ["--domain", "R1", "--precision", "bf16"], env=env, stderr=subprocess.PIPE, text=True),
        subprocess.Popen(train + [f"--domain=R{i}" for i in range(2, 6)], env=env, stderr=subprocess.PIPE, text=True),
    ]
    for job in jobs:  # at the same time, each alone
        assert job.wait() == 0, job.stderr.read()
    for name in ("R1", "R2", "R3", "R4", "R5"):
        metrics = json.loads(run.joinpath(*RESIDUAL, name, "config.json").read_text())["metrics"]
        assert metrics["precision"] == ("bf16" if name == "R1" else "fp32")
        same = (
            run.joinpath(*RESIDUAL, name, "model.safetensors").read_bytes()
            == tiny_run.joinpath(*RESIDUAL, name, "model.safetensors").read_bytes()
        )
        assert same == (name != "R1")  # fp32 in another process: the same bytes; bf16: other ones
    code, out, err = run_cli(["eval", "--run", run, "--data", run / "data" / "test.jsonl"], capsys)
    assert code == 0, err
    rows = {line.split()[0]: float(line.split()[1]) for line in out.splitlines()[2:]}
    assert {"red", "red_oracle", "red_uniform", "moe"} <= rows.keys() and all(0 <= acc <= 1 for acc in rows.values())
