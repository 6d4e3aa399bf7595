"""Full-batch fitting of one toy module to (x, y) by mean squared error.

Full batch because a domain is at most a few thousand pairs: no minibatch noise, and with a fixed
initial seed the run is deterministic.

Two optimisers, because the two kinds of model need different ones:
- "lbfgs" for the linear models. Their loss is a convex quadratic, but on a narrow interval far
  from the origin, e.g. [0.81, 1]^2, the bias and the weights are almost collinear and the
  problem is badly conditioned: Adam crawls along that valley for thousands of steps and stops
  far from (0.5, 0.5, 0), which would measure the optimiser, not Proposition 1. L-BFGS with a line
  search reaches the minimiser in a few dozen iterations.
- "adam" (with cosine decay to zero, so the final iterate settles instead of jittering at the
  step size) for the MLPs, the usual way to train a small network.
"""

import torch
from torch import Tensor, nn

from redkit.errors import RedkitError

OPTIMIZERS = ("adam", "lbfgs")


def fit(model: nn.Module, x: Tensor, y: Tensor, optimizer: str, steps: int, lr: float) -> float:
    """Train the parameters of `model` that require grad; return the final training MSE.

    x: (N, 2), y: (N, 1). `steps` counts Adam steps or L-BFGS iterations; `lr` is Adam's (L-BFGS
    uses its line search with unit step).
    """
    params = [p for p in model.parameters() if p.requires_grad]

    def loss() -> Tensor:  # scalar
        return ((model(x) - y) ** 2).mean()

    if optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
        for _ in range(steps):
            opt.zero_grad()
            loss().backward()
            opt.step()
            schedule.step()
    elif optimizer == "lbfgs":
        opt = torch.optim.LBFGS(
            params,
            lr=1.0,
            max_iter=steps,
            tolerance_grad=1e-12,
            tolerance_change=1e-15,
            line_search_fn="strong_wolfe",
        )

        def closure() -> Tensor:
            opt.zero_grad()
            value = loss()
            value.backward()
            return value

        opt.step(closure)
    else:
        raise RedkitError(f"unknown optimizer {optimizer!r} (known: {', '.join(OPTIMIZERS)})")
    with torch.no_grad():
        return loss().item()
