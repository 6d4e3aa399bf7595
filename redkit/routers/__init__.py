"""The router zoo, registered by name in the spine's ROUTERS registry (`--router NAME`); importing
this package registers them all.

    dense          softmax MLP (the spine's Router; today's default)
    switch         top-1, capacity, load-balancing loss          (topk.py)
    top2           GShard top-2                                   (topk.py)
    loss_free      selection bias, no auxiliary loss              (topk.py)
    expert_choice  experts pick decisions; non-causal             (expert_choice.py)
    spectra        prototypes, cosine, Sinkhorn, quota            (spectra.py)
    prototype      training-free: domain means, cosine nearest    (free.py)
    arrow          training-free: experts' top singular direction (free.py)
    labels         training-free: the domain marginal of a global head's label distribution (labels.py)
    gaussian       replay-free: per-domain class statistics, a shared-covariance Gaussian  (gaussian.py)
"""

from redkit.routers import expert_choice, free, gaussian, labels, spectra, topk  # noqa: F401  (registration)
from redkit.routers.base import RouterBase, RouterOutput  # noqa: F401
