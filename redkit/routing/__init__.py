"""Routing analysis (seed 004): exact routing-quality metrics, a router zoo, training-free routers,
monitors, and `redkit analyze routing`.

Axes used throughout: N routing decisions (examples or tokens), K experts, k experts chosen per
decision, D domains.

    metrics         load balance and decision quality, from α (N, K) [+ top-k, logits]
    specialisation  domain x expert affinity, purity, NMI, Jaccard, co-activation, Gram matrix
    stability       agreement, saturation and Kendall τ between two checkpoints or seeds
    routers         the zoo (dense, switch, top2, expert_choice, loss_free, spectra) and the
                    training-free routers (prototype, arrow), registered by name in the spine's
                    ROUTERS registry

This subpackage depends on the spine; the spine only ever looks a router up by name.
"""
