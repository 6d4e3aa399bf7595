"""RED as a module, in peft's shape: `REDConfig` (config.py), the expert layer and its mixing
(layer.py), `REDModel` (model.py: classifier + K residual experts + router on pooled features),
its artifacts (pretrained.py: save_pretrained / from_pretrained / from_run) and the wrapper around
any Hugging Face AutoModel (hf.py: `get_red_model`, imported on first use: it imports transformers).
"""

from redkit.red.config import REDConfig  # noqa: F401
from redkit.red.model import REDModel, REDOutput, router_loss  # noqa: F401

_HF = ("get_red_model", "REDForSequenceClassification", "REDSequenceOutput")


def __getattr__(name: str):
    if name in _HF:
        from redkit.red import hf

        return getattr(hf, name)
    raise AttributeError(f"module 'redkit.red' has no attribute {name!r}")
