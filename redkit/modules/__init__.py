"""Trainable modules that sit on pooled backbone features h (B, d), each saved on its own."""

from redkit.modules.layers import MODULES, Classifier, HeadExpert, LogitExpert, ResidualExpert, Router  # noqa: F401
from redkit.modules.routing import RouterBase, RouterOutput  # noqa: F401
from redkit.modules.store import load_module, save_module, module_exists, ModuleMeta  # noqa: F401
