"""peft's Arrow over the K LoRA experts: training-free, token-level routing inside every adapted layer.

For each layer and expert e, a prototype v_e = the top right singular vector of ΔW_e = B_e A_e;
each token x is routed by |<x, v_e>|, top-k, softmax / temperature, and the layer adds
Σ_e c_e(x) s_e B_e A_e x. peft computes the coefficients c and discards them; `ArrowRouting`
recomputes them from the same layer input and prototypes (the tests check that they reproduce the
layer's output) and averages them over an example's real tokens and over layers into (B, E):
its argmax against the true domain is Arrow's routing accuracy.

Why not `peft.create_arrow_model` as is: it gives the router adapter the experts' target modules
by their last name only (`query`, `dense`, ...), so with experts in the top-N layers the router
also lands in the lower layers and the pooler, which hold no expert, and the first forward fails
("stack expects a non-empty TensorList"). `arrow_backbone` does the same steps, with peft's own
compatibility checks, but targets the router at the modules that actually hold the experts.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from redkit.errors import RedkitError
from redkit_experiments.peers.lora import LoraBackbone

ROUTER = "arrow_router"


@dataclass
class ArrowSettings:
    top_k: int = 3  # peft's default
    temperature: float = 1.0  # peft's default

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise RedkitError(f"--arrow-top-k must be at least 1, not {self.top_k}")


def arrow_backbone(run, directories: list[Path], settings: ArrowSettings) -> LoraBackbone:
    """A fresh copy of the run's backbone with the experts in `directories` (task_0 .. task_{K-1},
    in domain order) and an Arrow router over them, active."""
    from peft import ArrowConfig, LoraConfig
    from peft.tuners.lora.arrow import check_loaded_lora_compatibility_arrow, ensure_adapters_target_linear_layers_only

    lb = LoraBackbone(run)
    names = [f"task_{i}" for i in range(len(directories))]
    for name, directory in zip(names, directories):
        lb.load(directory, name)  # checks each expert's backbone fingerprint
    config = ArrowConfig(
        top_k=min(settings.top_k, len(names)), router_temperature=settings.temperature, rng_seed=run.config.seed
    )
    config.task_adapter_names, config.gks_adapter_names = names, []
    try:
        _, rank = check_loaded_lora_compatibility_arrow(lb.peft, adapter_names=names)
        ensure_adapters_target_linear_layers_only(lb.peft, adapter_names=names)
    except (ValueError, TypeError) as err:
        raise RedkitError(
            f"lora_arrow: {str(err).splitlines()[0]} (task_i is expert {run.space.domains[0]} + i)"
        ) from None
    holders = [n for n, m in lb.base_model.named_modules() if hasattr(m, "lora_A") and names[0] in m.lora_A]
    lb.peft.add_adapter(ROUTER, LoraConfig(arrow_config=config, target_modules=holders, r=rank))
    lb.peft.set_adapter(ROUTER)
    lb.peft.eval()
    return lb


def try_create_arrow_model(run, directories: list[Path], settings: ArrowSettings, batch) -> dict:
    """peft's own `create_arrow_model` on a fresh copy of the backbone and one forward: what happened,
    never raised (the reason `arrow_backbone` exists, measured rather than asserted)."""
    from peft import ArrowConfig, create_arrow_model

    from redkit_experiments.peers.xlora import failure

    lb = LoraBackbone(run)
    try:
        config = ArrowConfig(
            top_k=min(settings.top_k, len(directories)),
            router_temperature=settings.temperature,
            rng_seed=run.config.seed,
        )
        lb.wrap(create_arrow_model(lb.base_model, [str(d) for d in directories], config))
        routers = sum(1 for m in lb.peft.modules() if hasattr(m, "lora_arrow") and ROUTER in m.lora_arrow)
        with torch.no_grad():
            lb.features(batch)
        return {"loads": True, "router_layers": routers}
    except Exception as err:  # noqa: BLE001 -- recording peft's failure is the point
        return failure(err) | {"router_layers": sum(1 for m in lb.base_model.modules() if hasattr(m, "lora_arrow"))}


def arrow_coefficients(layer, x: torch.Tensor) -> torch.Tensor:
    """Arrow's coefficients (B, T, E) in one LoRA layer for its input x (B, T, in), as peft computes them."""
    arrow = layer.lora_arrow[ROUTER]
    sim = torch.abs(x.to(arrow.prototypes.dtype) @ arrow.prototypes.T)  # (B, T, E)
    top, idx = torch.topk(sim, arrow.top_k, dim=-1)
    scores = torch.full_like(sim, float("-inf")).scatter(-1, idx, top)
    return torch.softmax(scores / arrow.temperature, dim=-1)


class ArrowRouting:
    """Forward hooks on every Arrow layer of `peft_model` that record per-example routing."""

    def __init__(self, peft_model):
        self.layers = [m for m in peft_model.modules() if hasattr(m, "lora_arrow") and ROUTER in m.lora_arrow]

    @contextmanager
    def record(self, mask: torch.Tensor, into: list[torch.Tensor]) -> Iterator[None]:
        """Appends to `into` one (B, E) tensor: coefficients averaged over real tokens (mask (B, T)) and layers."""
        per_layer: list[torch.Tensor] = []
        weights = mask.unsqueeze(-1).float()  # (B, T, 1)

        def hook(module, args, output):
            coeff = arrow_coefficients(module, args[0])  # (B, T, E)
            per_layer.append((coeff * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0))

        handles = [layer.register_forward_hook(hook) for layer in self.layers]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        if per_layer:
            into.append(torch.stack(per_layer).mean(dim=0))
