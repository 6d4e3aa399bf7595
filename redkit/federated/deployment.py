"""Flower's deployment runtime on this machine: one `flower-superlink`, one `flower-supernode` per owner (each
given only its name and its own data directory in its node config), and `flwr run` of redkit's app (flower_app.py).

    RUN/deployment/app/pyproject.toml    the Flower app: its components are redkit.federated.flower_app's
                                         `server` and `client`; the run config's "settings" is the Settings JSON
    RUN/deployment/run-config.toml       this run's settings (`flwr run --run-config`)
    RUN/deployment/flwr-home/config.toml the SuperLink connection `flwr run` uses (FLWR_HOME: nothing in ~/.flwr)
    RUN/deployment/nodes/<owner>/        each SuperNode's own FLWR_HOME (the app it installed from the SuperLink)
    RUN/deployment/logs/*.log            the SuperLink's, each SuperNode's and `flwr run`'s output
    RUN/deployment/credentials/          TLS and each owner's SuperNode key (credentials.py; not with --insecure)

The processes are what an owner runs on its own machine (docs/guides/federated.md gives the commands); here they
share 127.0.0.1, or with --netns the owners sit in a network namespace of their own (namespaces.py). Nothing is installed at run time (the SuperLink's `uv sync` of an app's dependencies is off):
every process is this environment's, so the ServerApp and ClientApps import the installed redkit.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from redkit.atomic import write_text
from redkit.errors import RedkitError
from redkit.federated.credentials import write_owner_key, write_tls
from redkit.federated.namespaces import OwnersNetwork
from redkit.federated.settings import Settings
from redkit.names import check_name

APP = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "redkit-federation"
version = "1.0.0"
description = "RED assembled from data owners' contributions, beside FedAvg (redkit.federated)"
license = "MIT"
dependencies = []  # redkit[federated], installed where every SuperLink and SuperNode runs

[tool.flwr.app]
publisher = "redkit"

[tool.flwr.app.components]
serverapp = "redkit.federated.flower_app:server"
clientapp = "redkit.federated.flower_app:client"

[tool.flwr.app.config]
settings = ""  # the run's Settings as JSON (flwr run --run-config)
"""


# Every owner here shares this machine's cores: one thread each (torch's intra-op pool, the tokenizer's), or
# N owners' pools of every core each would fight over them (measured: 10 owners on 2 cores, 2.9 x slower than
# one process doing their work in turn). On its own machine an owner's SuperNode takes whatever it has.
ONE_CORE_EACH = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


# The SuperLink's `--host/--port` (one port for its HTTP APIs): flwr 1.32 refuses them (a fresh install once resolved
# it); 1.42 is the release this runtime was built and measured with.
FLOWER_AT_LEAST = (1, 42)

STOP_GRACE = 10.0  # seconds for a process to exit on SIGTERM before SIGKILL (the run's results are written by then)


def require_flower() -> None:
    """Refuse, in one line, a Flower this runtime's commands do not fit (before any process starts)."""
    try:
        found = version("flwr")
    except PackageNotFoundError:
        raise RedkitError("the deployment runtime needs Flower: pip install 'redkit[federated]'") from None
    release = tuple(int(part) for part in re.findall(r"\d+", found)[:2])
    if release < FLOWER_AT_LEAST:
        wanted = ".".join(map(str, FLOWER_AT_LEAST))
        raise RedkitError(f"the deployment runtime needs flwr >= {wanted}, found {found}: pip install 'flwr>={wanted}'")


def free_port() -> int:
    """A port nobody listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_line(log: Path) -> str:
    """The last non-empty line a process wrote to its log (why it exited, as often as not)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(its log is empty)"


def wait_for_port(
    port: int, process: subprocess.Popen, name: str, log: Path, timeout: float = 60.0, host: str = "127.0.0.1"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RedkitError(
                f"{name} exited with code {process.returncode} before listening: {last_line(log)} ({log})"
            )
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise RedkitError(f"{name} did not listen on {host}:{port} within {timeout:.0f} s")


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


def node_config(owner: str, data: Path, work: Path) -> str:
    """`--node-config`: the owner's name, data and work directories, and nothing else of the federation's."""
    return f"owner={toml_string(owner)} data-dir={toml_string(str(data))} work-dir={toml_string(str(work))}"


class Federation:
    """The processes of one deployment on this host, each in its own process group (a SuperNode's ClientApps
    are its children): `stop` ends every group. network: the owners' SuperNodes in a network namespace of their
    own, reaching the SuperLink over a virtual link (namespaces.py); None: every process on 127.0.0.1."""

    def __init__(
        self,
        root: Path,
        owners: dict[str, Path],
        owner_work: Path,
        secure: bool = True,
        network: OwnersNetwork | None = None,
    ):
        # Absolute: every process runs in `root`, where a relative path (`--out runs/fed`) would be read twice.
        self.root, self.owner_work = root.resolve(), owner_work.resolve()
        self.owners = {
            check_name(name, "owner", "the deployment's owners"): data.resolve() for name, data in owners.items()
        }
        self.logs = self.root / "logs"
        bin_dir = str(Path(sys.executable).parent)  # the SuperLink and SuperNodes start flower-superexec from PATH
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.root / "flwr-home"),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "FLWR_DISABLE_UPDATE_CHECK": "1",
        }
        self.processes: dict[str, subprocess.Popen] = {}
        # secure: TLS to the SuperLink and each SuperNode authenticated by its owner's key (credentials.py)
        self.secure, self.credentials = secure, self.root / "credentials"
        self.network, self.host = network, network.server_ip if network else "127.0.0.1"
        self.tls = write_tls(self.credentials, self.host) if secure else None

    def start(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                args,
                env=self.env | (env or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.root,
            )
        self.processes[name] = process
        return process

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                with_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with_group(process, signal.SIGKILL)
                process.wait()

    def start_superlink(self) -> int:
        """The SuperLink, listening, and the connection `flwr` uses to reach it."""
        port = free_port()
        if self.secure:
            tls = self.tls
            secured = ["--ssl-ca-certfile", str(tls.ca), "--ssl-certfile", str(tls.certificate)]
            secured += ["--ssl-keyfile", str(tls.key), "--enable-supernode-auth"]  # registered keys only
        else:
            secured = ["--insecure"]
        link = self.start(
            "superlink",
            ["flower-superlink", *secured, "--disable-runtime-dependency-installation"]
            + ["--host", self.host, "--port", str(port)],
        )
        wait_for_port(port, link, "flower-superlink", self.logs / "superlink.log", host=self.host)
        self.write_connection(port)
        return port

    def write_connection(self, port: int) -> None:
        """The SuperLink's address (and the CA that signed its certificate) where `flwr` reads its connections."""
        trust = f"root-certificates = {toml_string(str(self.tls.ca))}" if self.secure else "insecure = true"
        write_text(
            self.root / "flwr-home" / "config.toml",
            f'[superlink]\ndefault = "redkit"\n\n[superlink.redkit]\naddress = "{self.host}:{port}"\n{trust}\n',
        )

    def register_owners(self) -> dict[str, str]:
        """{node id: owner}: each owner's public key registered with the SuperLink (`flwr supernode register`),
        which answers with the node id that key will connect as. Only these keys may connect."""
        registered = {}
        for owner in self.owners:
            _, public = write_owner_key(self.credentials / "owners", owner)
            done = subprocess.run(
                ["flwr", "supernode", "register", str(public), "redkit", "--format", "json"],
                env=self.env,
                capture_output=True,
                text=True,
                cwd=self.root,
                timeout=60,
            )
            try:
                registered[str(json.loads(done.stdout)["node-id"])] = owner
            except (ValueError, KeyError, TypeError):
                why = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
                raise RedkitError(f"flwr supernode register of owner {owner!r}'s key failed: {why[0]}") from None
        return registered

    def start_supernodes(self, link_port: int) -> None:
        for owner, data in self.owners.items():
            if self.secure:
                key = self.credentials / "owners" / owner  # its private key: the node id it was registered as
                secured = ["--root-certificates", str(self.tls.ca), "--auth-supernode-private-key", str(key)]
            else:
                secured = ["--insecure"]
            args = ["flower-supernode", *secured, "--superlink", f"{self.host}:{link_port}"]
            args += ["--port", str(free_port()), "--node-config", node_config(owner, data, self.owner_work / owner)]
            self.start(
                f"supernode-{owner}",
                self.network.inside(args) if self.network else args,
                env=ONE_CORE_EACH | {"FLWR_HOME": str(self.root / "nodes" / owner)},  # its own, as on its machine
            )

    def submit(self, link_port: int, settings: Settings, timeout: float) -> None:
        """`flwr run` of the app with this run's settings; returns when the run has ended (its logs streamed)."""
        app = self.root / "app"
        write_text(app / "pyproject.toml", APP)
        run_config = self.root / "run-config.toml"
        write_text(run_config, f"settings = {toml_string(settings.to_json())}\n")
        with open(self.logs / "flwr-run.log", "ab") as log:
            try:
                done = subprocess.run(
                    ["flwr", "run", str(app), "redkit", "--run-config", str(run_config), "--stream"],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    cwd=self.root,
                )
            except subprocess.TimeoutExpired:
                raise RedkitError(f"the run did not end within {timeout:.0f} s (see {self.logs})") from None
        if done.returncode:
            raise RedkitError(f"flwr run exited with code {done.returncode} (see {self.logs / 'flwr-run.log'})")


def with_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def run_deployment(
    settings: Settings,
    owners: dict[str, Path],
    root: Path,
    print_fn=print,
    watch=None,
    secure: bool = True,
    network: OwnersNetwork | None = None,
) -> dict:
    """The whole federation as processes on 127.0.0.1, stopped when the run ends; seconds {"start": until the
    SuperLink listened, every owner's key was registered and every SuperNode was started, "run": `flwr run` from
    submitting the app to the run's end, "stop": the processes' exit}. `watch(federation)`, if given, runs beside
    the run in a thread (the fault tests kill an owner with it). secure: TLS and SuperNode authentication (each
    owner's key registered); False: plain HTTP and any node may connect (Flower's --insecure)."""
    require_flower()
    seconds, processes = {}, Federation(root, owners, Path(settings.owner_work), secure, network)
    try:
        start = time.perf_counter()
        if network:
            network.up()
        port = processes.start_superlink()
        if secure:  # the server then checks that each node says it is the owner whose key it holds
            settings = replace(settings, registered=processes.register_owners())
        processes.start_supernodes(port)
        seconds["start"] = time.perf_counter() - start
        where = f" in network namespace {network.namespace}" if network else ""
        print_fn(
            f"flower-superlink on {processes.host}:{port}, {len(owners)} flower-supernodes{where} ({seconds['start']:.1f} s)"
        )
        if watch is not None:
            threading.Thread(target=watch, args=(processes,), daemon=True).start()
        submitted = time.perf_counter()
        processes.submit(port, settings, settings.timeout)
        seconds["run"] = time.perf_counter() - submitted
    finally:
        stopping = time.perf_counter()
        processes.stop()
        if network:
            network.down()
        seconds["stop"] = time.perf_counter() - stopping
    if not (Path(settings.run_dir) / "federation" / "server.json").is_file():
        raise RedkitError(f"the Flower server app ended without its results (see {root / 'logs'})")
    hosts = (
        {"superlink": processes.host, "owners": f"{network.owners_ip} (namespace {network.namespace})"}
        if network
        else {}
    )
    return {"seconds": seconds, "processes": len(processes.processes), "secure": secure, **hosts}
