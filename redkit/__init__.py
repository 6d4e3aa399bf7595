"""redkit: modular learning by post-hoc recomposition (Residual Expert Decomposition)."""

__version__ = "0.1.0"
