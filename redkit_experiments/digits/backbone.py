"""The digits benchmark's backbone: a small MLP from pixels to the features h every module sits on.

It plays the part that the fine-tuned language model plays in Task 1: trained once (stage base,
together with the shared classifier C, on a 10% subset), then frozen; its output on every image is
cached and the experts, heads, router and gate train on those cached features only.

Axes: B batch, P pixels (64 for 8x8 digits, 784 for MNIST), d hidden size.
"""

import hashlib
import json
from dataclasses import asdict, dataclass

import torch
from torch import nn

from redkit.errors import RedkitError

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


@dataclass
class MLPBackboneConfig:
    input_dim: int = 0  # P; 0 = taken from the data when the run opens it
    hidden: int = 128  # d, the feature width every module sees
    depth: int = 2  # linear layers, each followed by the activation
    activation: str = "gelu"

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise RedkitError(f"backbone activation must be one of {', '.join(ACTIVATIONS)}, not {self.activation!r}")
        if self.hidden < 1 or self.depth < 1:
            raise RedkitError(f"backbone hidden and depth must be at least 1 (got {self.hidden}, {self.depth})")


class MLPBackbone(nn.Module):
    """x (B, P) -> h (B, d): depth x (Linear, activation). The last activation is kept, so h is
    the same kind of post-nonlinearity representation as a transformer's pooled output."""

    def __init__(self, config: MLPBackboneConfig):
        super().__init__()
        if config.input_dim < 1:
            raise ValueError("MLPBackboneConfig.input_dim must be set from the data before building the backbone")
        self.config = config
        widths = [config.input_dim] + [config.hidden] * config.depth
        layers: list[nn.Module] = []
        for n_in, n_out in zip(widths, widths[1:]):
            layers += [nn.Linear(n_in, n_out), ACTIVATIONS[config.activation]()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, P) -> (B, d)
        return self.net(x)

    def fingerprint(self) -> str:
        """A hash of the architecture and the current weights: features, and every module trained
        on them, are valid only for equal fingerprints (the role Backbone.fingerprint plays for text)."""
        digest = hashlib.sha256(json.dumps(asdict(self.config), sort_keys=True).encode())
        for name, tensor in sorted(self.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return "mlp-" + digest.hexdigest()[:16]
