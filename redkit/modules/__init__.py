"""Trainable modules that sit on pooled backbone features h (B, d), each saved on its own (RED's
experts are in redkit/red/layer.py)."""

from redkit.modules.layers import MODULES, Classifier, HeadExpert, Router  # noqa: F401
from redkit.modules.routing import RouterBase, RouterOutput  # noqa: F401
from redkit.modules.store import ModuleMeta, load_module, module_exists, save_module  # noqa: F401
