"""Which CPU kernels torch runs: chosen by the CLI and by `redkit.reproducible()`, never on import.

Same seed, same numbers, on any x86-64 CPU: PyTorch picks its CPU kernels by instruction set
(AVX-512 where the CPU has it, else AVX2), and the two round differently: the same training step,
seed and data give other bits, and after thousands of steps other accuracies (the same Task 1 code
and seed gave MoE 0.9914 on one machine, 0.9919 on another). On this project's machines the choice
costs no speed, and every x86-64 CPU of the last decade has AVX2, so the CLI asks for it (see
docs/guides/reproducibility.md). ATen reads the choice once, when it first picks a kernel (the first
tensor operation after `import torch`); results.json records the kernels in use (provenance
"cpu_capability").
"""

import os
import platform
import sys
import warnings

CAPABILITY = "avx2"  # what redkit's own commands run on (x86-64 only; ATen ignores it elsewhere)


def reproducible(capability: str = CAPABILITY) -> str | None:
    """Ask torch for `capability`'s CPU kernels (ATEN_CPU_CAPABILITY) so that runs on any x86-64 CPU
    give the same bits; an ATEN_CPU_CAPABILITY already set in the environment wins. Call it before
    `import torch` (strictly: before torch's first tensor operation). Once torch has picked its
    kernels nothing changes them, and a RuntimeWarning says so when they differ from the request.
    Returns the capability asked for (None off x86-64, where there is nothing to choose)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    wanted = os.environ.setdefault("ATEN_CPU_CAPABILITY", capability)
    torch = sys.modules.get("torch")
    if torch is not None:
        in_use = torch.backends.cpu.get_cpu_capability()
        if in_use.lower() != wanted.lower():
            warnings.warn(
                f"redkit.reproducible(): torch already runs {in_use} kernels, not {wanted} (it picks them at its "
                f"first operation); call it before `import torch`, or set ATEN_CPU_CAPABILITY={wanted}",
                RuntimeWarning,
                stacklevel=2,
            )
    return wanted
