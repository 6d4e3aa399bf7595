"""The deployment runtime's refusals, before and as its processes start: a Flower too old for its commands is
refused in one line before anything starts (a fresh install once resolved flwr 1.32, whose SuperLink refuses
`--host/--port`), a process that exits before listening is named with the line that says why, and a relative run
directory reaches the processes, which run inside it, as paths they can read."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from redkit.errors import RedkitError  # noqa: E402
from redkit.federated import deployment  # noqa: E402
from redkit.federated.settings import Settings  # noqa: E402


@pytest.mark.parametrize("found", ["1.32.1", "1.41.0", "0.19.0"])
def test_an_older_flower_is_refused_before_any_process_starts(monkeypatch, tmp_path, found):
    monkeypatch.setattr(deployment, "version", lambda name: found)
    settings = Settings("{}", str(tmp_path / "run"), owners=1, rounds=0, owner_work=str(tmp_path / "owners"))
    with pytest.raises(RedkitError, match=rf"needs flwr >= 1\.42, found {found}"):
        deployment.run_deployment(
            settings, {"owner": tmp_path / "owner"}, tmp_path / "deployment", print_fn=lambda *_: None
        )
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
    federation = deployment.Federation(Path("runs/fed/deployment"), {}, Path("runs/fed/owners"))
    federation.logs.mkdir(parents=True)
    settings = Settings("{}", str(tmp_path / "runs/fed"), owners=1, rounds=0, owner_work=str(tmp_path / "owners"))
    federation.write_connection(1234)
    federation.submit(1234, settings, timeout=10)
    (args, kw) = calls[0]
    cwd = Path(kw["cwd"])
    app, run_config = cwd / args[2], cwd / args[args.index("--run-config") + 1]
    assert (app / "pyproject.toml").is_file() and run_config.is_file()
    assert (cwd / kw["env"]["FLWR_HOME"] / "config.toml").is_file()


def test_an_owner_is_named_by_its_node_config_never_by_its_data_directory(tmp_path):
    """The guide's SuperNodes all keep their data in a directory called "data": each is the owner its node
    config names; a node config without a name, or with one that is a path, is refused in one line."""
    import tomllib
    from flwr.app import Context, RecordDict

    from redkit.federated.flower_app import owner_paths

    def context(node_config: str) -> Context:
        parsed = tomllib.loads(node_config.replace('" ', '"\n'))
        return Context(run_id=1, node_id=1, node_config=parsed, state=RecordDict(), run_config={})

    settings = Settings("{}", str(tmp_path / "run"), owners=2)
    for owner in ("banking", "travel"):
        config = deployment.node_config(owner, tmp_path / owner / "data", tmp_path / owner / "work")
        assert owner_paths(context(config), settings) == (owner, tmp_path / owner / "data", tmp_path / owner / "work")
    unnamed = f"data-dir={deployment.toml_string(str(tmp_path / 'data'))}"
    for config, says in ((unnamed, 'no "owner"'), ('owner="../x" ' + unnamed, "owner")):
        with pytest.raises(RedkitError, match=says) as refused:
            owner_paths(context(config), settings)
        assert "\n" not in str(refused.value)


def test_only_a_registered_owner_key_connects_and_private_keys_stay_private(tmp_path):
    """The secured deployment: the SuperLink over TLS with SuperNode authentication; a SuperNode holding a key
    the server registered connects as the node id registered for it, one holding another key does not."""
    import json
    import stat

    federation = deployment.Federation(tmp_path / "deployment", {"banking": tmp_path / "banking"}, tmp_path / "work")
    try:
        port = federation.start_superlink()
        registered = federation.register_owners()
        (node_id,) = registered
        assert registered == {node_id: "banking"}
        intruder, _ = deployment.write_owner_key(tmp_path / "elsewhere", "banking")  # the name, not the key
        for name, key in (("banking", federation.credentials / "owners" / "banking"), ("intruder", intruder)):
            federation.start(
                f"supernode-{name}",
                ["flower-supernode", "--root-certificates", str(federation.tls.ca)]
                + ["--auth-supernode-private-key", str(key), "--superlink", f"127.0.0.1:{port}"]
                + ["--port", str(deployment.free_port()), "--node-config", 'owner="banking"'],
            )

        def online() -> list[str]:
            done = subprocess.run(
                ["flwr", "supernode", "list", "redkit", "--format", "json"],
                env=federation.env,
                capture_output=True,
                text=True,
                cwd=federation.root,
            )
            return [n["node-id"] for n in json.loads(done.stdout)["nodes"] if n["status"] == "online"]

        deadline = time.monotonic() + 60
        while not online() and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(3)  # the intruder has had as long as the genuine node took
        assert online() == [node_id]
    finally:
        federation.stop()
    for private in (federation.tls.key, federation.credentials / "owners" / "banking"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and `ip`")
def test_the_owners_namespace_reaches_the_server_over_its_link_and_nothing_on_the_server_s_loopback(tmp_path):
    """`--netns`: a listener on the server's end of the link is reached from inside the owners' namespace; one on
    the server's loopback is not (the owners' 127.0.0.1 is their own); `down` leaves no namespace behind."""
    from redkit.federated.namespaces import OwnersNetwork

    network = OwnersNetwork(namespace="redkit-test-owners", link="rk-test-s", peer="rk-test-o")
    probe = "import socket, sys; s = socket.socket(); s.settimeout(3); sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))"
    network.up()
    try:
        with socket.create_server((network.server_ip, 0)) as link, socket.create_server(("127.0.0.1", 0)) as local:
            reached = [
                subprocess.run(
                    network.inside([sys.executable, "-c", probe, host, str(server.getsockname()[1])])
                ).returncode
                for host, server in ((network.server_ip, link), ("127.0.0.1", local))
            ]
        assert reached[0] == 0 and reached[1] != 0, reached
    finally:
        network.down()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "redkit-test-owners" not in listed
