"""Importing redkit changes nothing in the process (docs/guides/design.md, decision 13): no environment variable,
no global torch state. Only the CLI and an explicit redkit.reproducible() choose kernels."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each test starts Python processes that import torch

# Snapshot torch's global state and the environment after importing the libraries redkit builds on
# (scikit-learn sets KMP_* and peft TORCHINDUCTOR_CACHE_DIR on import, Flower GRPC_VERBOSITY: theirs, not redkit's;
# run alone this test saw Flower's, which the suite's earlier federated tests had already put in its environment), import
# every module of redkit and of the paper's experiments found on disk (the CLI is an entry point and serve/ an
# extra: left out), snapshot again, print both.
PROBE = r"""
import importlib, json, os, pathlib, torch, sklearn, transformers, peft
try:
    import flwr.app  # the federated extra
except ImportError:
    pass
def state():
    return {"env": dict(os.environ), "threads": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
            "deterministic": torch.are_deterministic_algorithms_enabled(), "dtype": str(torch.get_default_dtype()),
            "grad": torch.is_grad_enabled()}
before = state()
import redkit, redkit_experiments
names = []
for package in (redkit, redkit_experiments):
    root = pathlib.Path(package.__file__).parent
    names += sorted(".".join((package.__name__,) + f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                    for f in root.rglob("*.py") if not {"cli", "cli.py", "serve"} & set(f.relative_to(root).parts))
for name in names:
    importlib.import_module(name)
print(json.dumps({"before": before, "after": state(), "imported": len(names),
                  "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def clean_env() -> dict:
    return {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "ATEN_CPU_CAPABILITY",
            "TQDM_DISABLE",
            "HF_HUB_DISABLE_PROGRESS_BARS",
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_VERBOSITY",
        )
    }


def test_importing_every_library_module_changes_no_environment_and_no_torch_state():
    done = subprocess.run([sys.executable, "-c", PROBE], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["imported"] > 150  # the walk found both packages, not empty ones
    changed = {
        k
        for k in seen["before"]["env"].keys() | seen["after"]["env"].keys()
        if seen["before"]["env"].get(k) != seen["after"]["env"].get(k)
    }
    assert not changed, f"importing redkit changed {sorted(changed)}"
    assert seen["before"] == seen["after"]
    if platform.machine().lower() in ("x86_64", "amd64"):  # ATen's own pick: the best the CPU has, as without redkit
        best = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
            env=clean_env(),
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert seen["capability"] == best


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 only")
def test_reproducible_pins_avx2_kernels_before_torch_and_warns_after():
    """AVX-512 and AVX2 kernels round differently; one kernel set everywhere keeps runs identical. An
    ATEN_CPU_CAPABILITY the user set wins; called after torch, it can change nothing and says so."""
    probe = "import redkit; redkit.reproducible(); import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = clean_env()
    assert (
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.strip() == "AVX2"
    )
    plain = "import redkit, torch; print(torch.backends.cpu.get_cpu_capability())"
    assert (
        subprocess.run(
            [sys.executable, "-c", plain], env=env | {"ATEN_CPU_CAPABILITY": "default"}, capture_output=True, text=True
        ).stdout.strip()
        == "DEFAULT"
    )
    assert (
        subprocess.run(
            [sys.executable, "-c", probe], env=env | {"ATEN_CPU_CAPABILITY": "default"}, capture_output=True, text=True
        ).stdout.strip()
        == "DEFAULT"
    )
    # Once torch has picked its kernels (at the first one it runs), asking again changes nothing, and says so.
    late = (
        "import torch, warnings, redkit; torch.ones(3).sum(); before = torch.backends.cpu.get_cpu_capability()\n"
        "with warnings.catch_warnings(record=True) as caught:\n    warnings.simplefilter('always'); redkit.reproducible('default')\n"
        "print(before == torch.backends.cpu.get_cpu_capability(), [str(w.message) for w in caught])"
    )
    out = subprocess.run([sys.executable, "-c", late], env=env, capture_output=True, text=True).stdout.strip()
    assert out.startswith("True ") and "already runs" in out


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 only")
def test_the_cli_runs_on_avx2_kernels():
    probe = "import redkit.cli, torch; print(torch.backends.cpu.get_cpu_capability())"
    assert (
        subprocess.run([sys.executable, "-c", probe], env=clean_env(), capture_output=True, text=True).stdout.strip()
        == "AVX2"
    )
