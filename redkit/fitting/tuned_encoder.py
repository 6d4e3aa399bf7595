"""What a run of tuned owners reads a query as (redkit/fitting/tuned_owners.py): the frozen prefix once, then the
pretrained top and every owner's own top layers on the same prefix states, side by side.

    (B, T) tokens ─► prefix (frozen) ─► states (B, T, d)
                                     ├─► pretrained top, pooled: h          ┐ r = [h, lower] (2d): what the router reads
                                     ├─► mean of the states: lower         ┘ (redkit/incremental/tuned.py router_input)
                                     └─► owner k's top, pooled: z_k (d)     what owner k's rows and density read
    features (B, 2d + K d) = [r, z_1, …, z_K]

The run evaluates, predicts and serves from these features as from any run's (the compositions `red_tuned`,
`red_tuned_oracle`: redkit/compositions.py; the owners' OOS score: redkit/oos/owner_density.py), so its bundle's ONNX
graph is this encoder under the same modules. Every owner's top runs on every query, K times the top layers' cost
(20 layer passes for CLINC150's ten owners of two, beside the prefix's four): no shape depends on the routing, and
the graph exports as it is.
"""

import copy
import hashlib

import torch
from torch import nn

from redkit.backbone import Backbone
from redkit.backbone.model import hash_state
from redkit.errors import RedkitError
from redkit.incremental.tuned import router_input
from redkit.modules.store import load_state


class TunedEncoder(nn.Module):
    """(input_ids, attention_mask) -> (B, 2d + K d) [r, z_1, …, z_K]; Backbone's interface where `encode` and the
    feature cache read it (tokenize, autocast, fingerprint, hidden_size, config)."""

    def __init__(self, backbone: Backbone, tops: list[dict[str, torch.Tensor]]):
        super().__init__()
        self.backbone = backbone  # its top: the pretrained one (the replay-free host's), for h
        self.owner_tops = nn.ModuleList()
        for state in tops:
            layers = copy.deepcopy(backbone.top_layers).requires_grad_(False)
            backbone.load_top_state_dict(state, layers)
            self.owner_tops.append(layers.eval())
        self.config = backbone.config
        self.source_fingerprint, self.split_at = backbone.source_fingerprint, backbone.split_at
        self.hidden_size = (2 + len(tops)) * backbone.hidden_size
        digest = hashlib.sha256(backbone.fingerprint().encode())
        for state in tops:
            hash_state(digest, state)
        self._fingerprint = digest.hexdigest()[:16]

    def tokenize(self, texts: list[str], padding: bool | str = "longest") -> dict[str, torch.Tensor]:
        return self.backbone.tokenize(texts, padding)

    def autocast(self):
        return self.backbone.autocast()

    def fingerprint(self) -> str:
        """Of the features: the backbone's and every owner's top layers (the feature cache's key)."""
        return self._fingerprint

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        backbone = self.backbone
        if prefix is None:
            prefix = backbone.run_prefix(input_ids, attention_mask)  # (B, T, d)

        def pooled(layers: nn.ModuleList | None) -> torch.Tensor:  # (B, d)
            return backbone.pool(backbone.run_top(input_ids, attention_mask, prefix, layers), attention_mask)

        h = pooled(None)
        r = router_input(h, prefix, attention_mask, dtype=h.dtype)  # (B, 2d)
        return torch.cat([r, *(pooled(layers) for layers in self.owner_tops)], dim=1)

    @classmethod
    def from_run(cls, run) -> "TunedEncoder":
        """`run`'s backbone and every domain's tuned top layers (modules/experts/tuned/<d>), checked against it."""
        from redkit.fitting.tuned_owners import TUNED_PARTS

        backbone, tops = run.backbone, []
        for domain in run.space.domains:
            path = run.module_dir(*TUNED_PARTS[0], domain)
            state, meta = load_state(path, run.fingerprint)
            check_top(path, state, meta, backbone)
            tops.append(state)
        return cls(backbone, tops).to(run.device)


def check_top(path, state: dict[str, torch.Tensor], meta, backbone: Backbone) -> None:
    """An owner's tuned top layers (`state`, `meta` as load_state read them from `path`): of `backbone`'s source
    weights, split where it is split, with its top layers' tensor names and shapes; one line otherwise."""
    expected = {"source_fingerprint": backbone.source_fingerprint, "split_at": backbone.split_at}
    found = {key: meta.config.get(key) for key in expected}
    if found != expected:
        raise RedkitError(f"{path}: top layers of backbone {found}, but the run's backbone is {expected}")
    shapes = {key: tensor.shape for key, tensor in backbone.top_state_dict().items()}
    if {key: tensor.shape for key, tensor in state.items()} != shapes:
        raise RedkitError(f"{path}: its tensors are not the backbone's top layers (names or shapes differ)")
