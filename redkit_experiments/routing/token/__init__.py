"""Token-level routers that drop into Hugging Face sparse-MoE blocks (the routing-quality protocol at token level).

    context        what a model's gates share in a forward: padding mask, (B, T), cross-layer state
    base           the gate contract (logits, top-k weights, top-k index) and the TOKEN_ROUTERS registry
    topk           dense (the stock gate, bit-identical), switch, top2, loss_free
    expert_choice  experts pick tokens (as many slots as the busiest token needs)
    spectra        GRU state, expression projector, Sinkhorn + quota, orthogonality, speciality
    replace        replace_router(model, name, **config)

Importing this package registers the routers; it imports transformers (replace.py).
"""

from redkit_experiments.routing.token import expert_choice, spectra, topk  # noqa: F401  (registration)
from redkit_experiments.routing.token.base import TOKEN_ROUTERS, TokenRouter, router_aux_loss, token_routers  # noqa: F401
from redkit_experiments.routing.token.replace import moe_blocks, replace_router  # noqa: F401
