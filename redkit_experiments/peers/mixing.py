"""Per-example weights over LoRA experts, applied inside every adapted layer:

    y = W x + Σ_i α_i (s_i B_i A_i x),     α (B, K) per example, s_i = lora_alpha / r of expert i

This is RED's composition moved from the pooled feature into the top layers: with α from RED's
router it is `lora_red`, with α = 1/K `lora_uniform`, with α = one-hot(domain) it equals peft's own
per-example selection (`adapter_names=`), which the tests check. peft mixes adapters per example
only by hard selection, so the weighted sum is added by a forward hook on each LoRA layer while
peft's own adapter path is switched off (`disable_adapter`): the base layer runs once.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _lora_layers(peft_model, names: list[str]) -> list[tuple[torch.nn.Module, list[int]]]:
    """(LoRA layer, indices into `names` of the experts it holds) for every layer holding any."""
    from peft.tuners.lora import LoraLayer

    out = []
    for module in peft_model.modules():
        if isinstance(module, LoraLayer):
            present = [k for k, name in enumerate(names) if name in module.lora_A]
            if present:
                out.append((module, present))
    return out


@contextmanager
def mixed_experts(peft_model, names: list[str], alpha: torch.Tensor) -> Iterator[None]:
    """Within the block, every forward of `peft_model` adds Σ_i α[:, i] · update of expert names[i]."""
    handles = []

    def add_mixture(present: list[int]):
        def hook(module, args, output):
            x = args[0]  # (B, T, in)
            a = alpha[:, present].to(output.dtype)  # (B, K') the experts this layer holds
            updates = torch.stack(
                [
                    module.lora_B[names[k]](module.lora_A[names[k]](module.lora_dropout[names[k]](x)))
                    * module.scaling[names[k]]
                    for k in present
                ],
                dim=1,
            )  # (B, K', T, out)
            return output + torch.einsum("bk,bk...->b...", a, updates)

        return hook

    with peft_model.disable_adapter():  # base layers only; the hooks add the mixture
        try:
            for module, present in _lora_layers(peft_model, names):
                handles.append(module.register_forward_hook(add_mixture(present)))
            yield
        finally:
            for handle in handles:
                handle.remove()
