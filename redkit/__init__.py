"""redkit: modular learning by post-hoc recomposition (Residual Expert Decomposition)."""

import os
import platform

__version__ = "0.1.0"

# Same seed, same numbers, on any x86-64 CPU: PyTorch picks its CPU kernels by instruction set
# (AVX-512 where the CPU has it, else AVX2), and the two round differently: the same training
# step, seed and data give other bits, and after thousands of steps other accuracies (the same
# Task 1 code and seed gave MoE 0.9914 on one machine, 0.9919 on another). On this project's
# machines the choice costs no speed. Every x86-64 CPU of the last decade has AVX2, so redkit asks for
# it unless told otherwise. This must happen before torch is first imported; results.json records
# the kernels in use (provenance "cpu_capability"). Set ATEN_CPU_CAPABILITY yourself to override.
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")

_API = ("fit", "load", "FittedRun", "Prediction")  # redkit.api
_RED = ("REDConfig", "REDModel", "get_red_model")  # redkit.red
__all__ = [*_API, *_RED]


def __getattr__(name: str):
    """`redkit.fit`, `redkit.REDModel`, ...: the Python API (redkit.api) and the RED module
    (redkit.red), imported on first use so that `import redkit` stays cheap (no torch)."""
    if name in _API:
        from redkit import api

        return getattr(api, name)
    if name in _RED:
        from redkit import red

        return getattr(red, name)
    raise AttributeError(f"module 'redkit' has no attribute {name!r}")
