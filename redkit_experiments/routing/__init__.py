"""Routing analysis (the routing-quality protocol): exact routing-quality metrics, a router zoo, training-free routers,
monitors, and `redkit analyze routing`.

Axes used throughout: N routing decisions (examples or tokens), K experts, k experts chosen per
decision, D domains.

    metrics         load balance and decision quality, from α (N, K) [+ top-k, logits]
    specialisation  domain x expert affinity, purity, NMI, Jaccard, co-activation, Gram matrix
    stability       agreement, saturation and Kendall τ between two checkpoints or seeds
    token           the zoo at token level inside Hugging Face MoE blocks: replace_router(model, name)
    routers         the zoo (dense, switch, top2, expert_choice, loss_free, spectra) and the
                    training-free routers (prototype, arrow), registered by name in the spine's
                    ROUTERS registry

This subpackage depends on the spine; the spine only ever looks a router up by name.
"""


def __getattr__(name: str):
    """`redkit_experiments.routing.replace_router` and `router_aux_loss` (token level), imported on first use:
    they need transformers, which the pooled routers do not."""
    if name in ("replace_router", "router_aux_loss", "TOKEN_ROUTERS"):
        from redkit_experiments.routing import token

        return getattr(token, name)
    raise AttributeError(f"module 'redkit_experiments.routing' has no attribute {name!r}")
