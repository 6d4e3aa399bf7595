"""The experts as the routing analysis sees them: their modules and their weight updates."""

import torch
from torch import nn

from redkit.errors import RedkitError
from redkit.modules.layers import Classifier
from redkit.red.layer import ResidualExpert

ROLES = {"router": "residual experts", "gate": "full heads"}  # what RED's router / the MoE gate weighs


def expert_modules(run, role: str) -> list[nn.Module]:
    """The K experts the router of `role` weighs: RED's residual experts or the MoE's heads."""
    from redkit.compositions import ModuleSet

    if role not in ROLES:
        raise RedkitError(f"unknown router role {role!r} (known: {', '.join(ROLES)})")
    modules = ModuleSet(run)
    return modules.experts("residual") if role == "router" else modules.heads()


@torch.no_grad()
def weight_update(expert: nn.Module) -> torch.Tensor:
    """What an expert adds, as one matrix acting on h: B A (d, d) for a residual expert (its linear
    part, as for LoRA: Δh ≈ B σ(A h)); the weight W (C, d) of a logit expert or a full head."""
    if isinstance(expert, ResidualExpert):
        return expert.up.weight @ expert.down.weight
    if isinstance(expert, Classifier):
        return expert.linear.weight.clone()
    raise RedkitError(f"no weight update defined for a {type(expert).__name__}")
