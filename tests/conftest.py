"""Shared fixtures: one tiny trained run per test session, and a helper that runs the real CLI.

Progress bars are switched off for the whole session *before* tqdm or transformers are imported:
they write to stderr, and the CLI tests check that an error is exactly one line on stderr. On a
terminal the bars (leave=False) erase themselves; in a captured stream they would be noise.
"""

import os

import redkit

redkit.reproducible()  # the CLI's kernels for every test, in-process ones included (before torch is imported)
os.environ.setdefault("TQDM_DISABLE", "1")  # read by tqdm when it is imported
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bar
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Under pytest-xdist the workers split the cores (two workers on two cores: one thread each), or their kernels' threads
# fight over them; the processes the tests start inherit it.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault(
        "OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    )
# One encoder cache for the session (redkit/bundle/encoder_cache.py), never the user's: the tests' exports share it,
# the processes they start (the deployment runtime's ServerApp, CLI subprocesses) too, and it goes with the session.
SESSION_CACHE = None
if "REDKIT_CACHE" not in os.environ:
    import tempfile

    SESSION_CACHE = tempfile.mkdtemp(prefix="redkit-test-cache-")
    os.environ["REDKIT_CACHE"] = SESSION_CACHE

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from redkit.plugins import load_plugins  # noqa: E402

load_plugins()  # the test process is the top: every registry filled, as the CLI and the API fill them

TINY_RUN_ARGS = ("--n", "400", "--max-epochs", "1")

# Fixtures that train something (a run, a decomposer, toy models), start processes or load a backbone:
# every test that uses one, directly or through another fixture, is marked slow (`pytest -m "not slow"`
# leaves it out).
HEAVY_FIXTURES = {
    "tiny_run",
    "digits_run",
    "one_process",
    "fitted",
    "peers_run",
    "qwen_run",
    "analysed",
    "study_run",
    "tiny_decomposer",
    "run",
    "experts",
    "minilm",
    "tiny_qwen3",
    "served",
    "world",
    "studied",
}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if SESSION_CACHE is not None:
        import shutil

        shutil.rmtree(SESSION_CACHE, ignore_errors=True)


# `make test` runs two pytest-xdist workers (`-n 2 --dist loadfile`: each file's tests on one worker, so that a module's
# fixtures are built once). The files that start processes and wait on them (Flower's runtimes with their round
# timeouts and heartbeats, torchrun's ranks, CLI runs killed and resumed) go first, so that their waits overlap the
# rest of the suite on the other worker and the two workers end together. (Not `--dist loadgroup`: with pytest 9.2
# pytest-xdist 3.8 drops the groups and sends the tests one by one, pytest-dev/pytest-xdist#1386.)
WAITING_FILES = (
    "test_federated.py",
    "test_kill_anywhere.py",
    "test_distributed.py",
    "test_federated_deployment.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # a stable sort: the waiting files first, in WAITING_FILES's order, then the rest as collected
    items.sort(
        key=lambda item: WAITING_FILES.index(item.path.name) if item.path.name in WAITING_FILES else len(WAITING_FILES)
    )


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """`redkit ARGV` in this process -> (exit code, stdout, stderr). argparse's own exits (bad
    flags) come back as their exit code; any other exception propagates and fails the test."""
    from redkit.cli import main

    capsys.readouterr()  # drop whatever earlier code printed
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def load_script(name: str):
    """scripts/NAME.py as a module (the scripts are files, not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete trained task1 run (400 examples, one epoch per stage, embedded backbone), built
    once per session with the real CLI. Tests must not modify it: copy it (shutil.copytree) first.
    Under pytest-xdist the workers share one: the first that needs it builds it under a file lock in the
    session's base directory, the others wait for it and read it (pytest-xdist's recipe for a session
    fixture built once)."""
    from filelock import FileLock

    from redkit.cli import main

    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # each worker's base directory lies in the session's
    out = root / "tiny_run" / "run"
    with FileLock(str(root / "tiny_run.lock")):
        if not (out / "results.json").is_file():  # not built yet, or a build that crashed: `reproduce` resumes it
            code = main(["reproduce", "task1", *TINY_RUN_ARGS, "--out", str(out)])
            assert code == 0, f"building the tiny run failed with exit code {code}"
    assert (out / "results.json").is_file() and (out / "modules" / "router" / "config.json").is_file()
    return out
