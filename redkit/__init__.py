"""redkit: modular learning by post-hoc recomposition (Residual Expert Decomposition)."""

from redkit.kernels import reproducible

__version__ = "0.1.0"

# Importing redkit changes no environment variable and no torch state (docs/guides/design.md, decision 13): the
# CLI chooses torch's CPU kernels, and API users who want the CLI's bits call redkit.reproducible()
# before they import torch.
_API = ("fit", "load", "FittedRun", "Prediction")  # redkit.api
_RED = ("REDConfig", "REDModel", "get_red_model")  # redkit.red
__all__ = [*_API, *_RED, "reproducible"]


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
