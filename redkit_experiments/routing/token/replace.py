"""`replace_router(model, name, **config)`: put a token router of the zoo into every sparse-MoE
block of a loaded transformers model (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, and any 5.x block that
has a `.gate` scoring (E, d) and an `.experts`).

    model = AutoModelForCausalLM.from_config(MixtralConfig(...))
    replace_router(model, "spectra", gru="both", expression=False)
    out = model(input_ids, attention_mask=mask, output_router_logits=True)
    loss = out.loss + router_aux_loss(model)       # out.aux_loss is the model's own, as before

What stays as it was: the block's forward (it calls the gate exactly as before), the router logits
the model records (`output_router_logits`, index 0 of the gate's output), the model's
load-balancing loss and `RoutingMonitor`. transformers installs its recording hooks once per model,
on instances of its own router class; so replace_router makes sure they are installed and hooks
each new gate itself, exactly once.
"""

from torch import nn
from transformers import PreTrainedModel
from transformers.utils.output_capturing import install_output_capuring_hook, maybe_install_capturing_hooks

from redkit.errors import RedkitError
from redkit_experiments.routing.token.base import TOKEN_ROUTERS, TokenRouter
from redkit_experiments.routing.token.context import RoutingContext


def moe_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's sparse-MoE blocks, in module order: a `.gate` with an (E, d) weight or a token
    router, and an `.experts`."""
    blocks = []
    for module in model.modules():
        gate, experts = getattr(module, "gate", None), getattr(module, "experts", None)
        if not isinstance(gate, nn.Module) or experts is None:
            continue
        weight = getattr(gate, "weight", None)
        if isinstance(gate, TokenRouter) or (weight is not None and weight.dim() == 2 and hasattr(gate, "top_k")):
            blocks.append(module)
    return blocks


def _gate_shape(gate: nn.Module) -> dict:
    """dim, num_experts, top_k (+ the stock renormalisation) of the gate being replaced."""
    if isinstance(gate, TokenRouter):
        c = gate.config
        return {"dim": c.dim, "num_experts": c.num_experts, "top_k": gate.stock_top_k}
    num_experts, dim = gate.weight.shape
    return {"dim": dim, "num_experts": num_experts, "top_k": gate.top_k}


def _stock_options(gate: nn.Module, cls: type[TokenRouter]) -> dict:
    """What the dense router needs to copy the stock gate bit for bit."""
    if isinstance(gate, TokenRouter) or cls is not TOKEN_ROUTERS["dense"]:
        return {}
    if hasattr(gate, "norm_topk_prob"):  # Qwen2/3-MoE, OLMoE
        return {"normalise": bool(gate.norm_topk_prob), "cast_to_logits_dtype": True}
    return {"normalise": True}


def _install_hooks(model: nn.Module) -> RoutingContext:
    """One context per model (kept across replacements): pre-hooks on its PreTrainedModels and blocks."""
    context = getattr(model, "_redkit_routing_context", None)
    if context is not None:
        return context
    context = RoutingContext()
    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.register_forward_pre_hook(context.on_model_call, with_kwargs=True)
    for block in moe_blocks(model):
        block.register_forward_pre_hook(context.on_block_call)
    model._redkit_routing_context = context
    return context


def replace_router(model: nn.Module, name: str, **config) -> nn.Module:
    """Swap the gate of every sparse-MoE block of `model` (in place) for the token router `name`
    configured by `config` (its Config's fields; dim, num_experts and top_k come from the model).
    Returns the model."""
    cls = TOKEN_ROUTERS[name]  # an unknown name fails (did you mean) before anything changes
    blocks = moe_blocks(model)
    if not blocks:
        raise RedkitError(
            f"{type(model).__name__} has no sparse-MoE blocks (a module with a .gate of shape "
            "(experts, hidden) and .experts): nothing to replace"
        )
    fixed = {"dim", "num_experts"}
    if fixed & set(config):
        raise RedkitError(
            f"router option(s) {', '.join(sorted(fixed & set(config)))} come from the model and cannot be set"
        )
    unknown = set(config) - set(cls.Config.__dataclass_fields__)
    if unknown:
        raise RedkitError(
            f"unknown option(s) {', '.join(sorted(unknown))} of token router {name!r} "
            f"(known: {', '.join(f for f in cls.Config.__dataclass_fields__ if f not in fixed)})"
        )
    routers = []
    for block in blocks:
        shape = _gate_shape(block.gate)
        settings = shape | _stock_options(block.gate, cls) | config
        router = cls(cls.Config(**settings))
        router.stock_top_k = shape["top_k"]
        router.take_over(block.gate)
        gate_parameter = next(block.gate.parameters(), None)
        if gate_parameter is not None:
            router.to(device=gate_parameter.device, dtype=gate_parameter.dtype)
        router.train(block.training)
        routers.append(router)
    context = _install_hooks(model)
    for module in model.modules():  # transformers' recording hooks, installed now on the stock gates ...
        if isinstance(module, PreTrainedModel):
            maybe_install_capturing_hooks(module)
    for layer, (block, router) in enumerate(zip(blocks, routers)):
        router.bind(context, block.experts, layer)
        block.gate = router
        install_output_capuring_hook(router, "router_logits", 0)  # ... and on each new gate, once
    return model
