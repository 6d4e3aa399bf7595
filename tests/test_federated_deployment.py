"""The deployment runtime's refusals, before and as its processes start: a Flower too old for its commands is
refused in one line before anything starts (a fresh install once resolved flwr 1.32, whose SuperLink refuses
`--host/--port`), a process that exits before listening is named with the line that says why, and a relative run
directory reaches the processes, which run inside it, as paths they can read."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from redkit.errors import RedkitError  # noqa: E402
from redkit.federated import deployment  # noqa: E402
from redkit.federated.flower_app import Settings  # noqa: E402


@pytest.mark.parametrize("found", ["1.32.1", "1.41.0", "0.19.0"])
def test_an_older_flower_is_refused_before_any_process_starts(monkeypatch, tmp_path, found):
    monkeypatch.setattr(deployment, "version", lambda name: found)
    settings = Settings("{}", str(tmp_path / "run"), owners=1, rounds=0, owner_work=str(tmp_path / "owners"))
    with pytest.raises(RedkitError, match=rf"needs flwr >= 1\.42, found {found}"):
        deployment.run_deployment(settings, [tmp_path / "owner"], tmp_path / "deployment", print_fn=lambda *_: None)
    assert not (tmp_path / "deployment").exists()


def test_the_installed_flower_is_one_the_runtime_accepts():
    deployment.require_flower()  # pyproject's `flwr[simulation]>=1.42`: what `make test` installs passes


def test_a_process_that_exits_before_listening_is_named_with_its_last_log_line(tmp_path):
    log = tmp_path / "superlink.log"
    with open(log, "wb") as out:
        script = "import sys; print('usage: ...'); print('error: unrecognized arguments: --port 1'); sys.exit(2)"
        process = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT)
    process.wait()
    with pytest.raises(RedkitError) as refused:
        deployment.wait_for_port(deployment.free_port(), process, "flower-superlink", log, timeout=10)
    message = str(refused.value)
    assert "exited with code 2 before listening: error: unrecognized arguments: --port 1" in message
    assert str(log) in message and "\n" not in message


class Finished:  # what the stubbed subprocess.run returns: a `flwr run` that ended well
    returncode = 0


def test_a_relative_run_directory_gives_every_process_paths_it_can_read(monkeypatch, tmp_path):
    """`redkit federate --runtime deployment --out runs/fed`: the processes run in RUN/deployment, so the app,
    run config and FLWR_HOME they are given must not be relative to where the command started."""
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append((args, kw)) or Finished())
    federation = deployment.Federation(Path("runs/fed/deployment"), [], Path("runs/fed/owners"))
    federation.logs.mkdir(parents=True)
    settings = Settings("{}", str(tmp_path / "runs/fed"), owners=1, rounds=0, owner_work=str(tmp_path / "owners"))
    federation.submit(1234, settings, timeout=10)
    (args, kw) = calls[0]
    cwd = Path(kw["cwd"])
    app, run_config = cwd / args[2], cwd / args[args.index("--run-config") + 1]
    assert (app / "pyproject.toml").is_file() and run_config.is_file()
    assert (cwd / kw["env"]["FLWR_HOME"] / "config.toml").is_file()
