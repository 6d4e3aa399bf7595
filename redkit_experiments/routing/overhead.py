"""Where a routed composition's time goes, per component, on a batch of the split (RED: the router
weighs the residual experts; measured with the helpers of `redkit study complexity`):

    router forward   logits = R(h)
    selection        route(h) minus the forward: softmax, top-k / Sinkhorn / capacity, weights
    expert forward   all K experts' outputs (redkit dispatches densely; `dispatched` scales the
                     FLOPs by the mean number of experts a decision actually uses, over K)
    combination      Σ α_i Δh_i and the shared classifier C(h + ·)

FLOPs are torch.utils.flop_counter's (matrix products; elementwise work counts 0), per example.
Times are medians over `repeats` rounds in which every component is called once in turn, on one
thread: a burst of load from another process then slows all components alike instead of one.
"""

import time

import numpy as np
import torch

from redkit.compositions import MIXTURES, ModuleSet
from redkit.threads import one_thread
from redkit_experiments.study.complexity import flops_per_call


def interleaved_ms(calls: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median ms per call of each function, timed round-robin after 3 warm-up rounds."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(repeats + 3):
        for name, fn in calls.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            if round_ >= 3:
                times[name].append((time.perf_counter() - start) * 1000)
    return {name: float(np.median(t)) for name, t in times.items()}


@torch.no_grad()
def overhead(run, role: str, h: torch.Tensor, repeats: int) -> dict:
    modules = ModuleSet(run)
    router = getattr(modules, role)().eval()
    mixture = MIXTURES["residual" if role == "router" else "heads"]
    h = h.to(run.device)
    out = router.route(h)
    outputs = mixture.outputs(modules, h)
    calls = {
        "router forward": lambda: router(h),
        "route (forward + selection)": lambda: router.route(h),
        "expert forward": lambda: mixture.outputs(modules, h),
        "combination": lambda: mixture.mix(modules, h, outputs, out.weights),
    }
    with one_thread():
        ms = interleaved_ms(calls, repeats, run.device)
    rows = {name: {"ms": ms[name], "flops_per_example": flops_per_call(fn) / len(h)} for name, fn in calls.items()}
    both = rows.pop("route (forward + selection)")
    rows["selection"] = {
        "ms": max(both["ms"] - rows["router forward"]["ms"], 0.0),
        "flops_per_example": both["flops_per_example"] - rows["router forward"]["flops_per_example"],
    }
    active = float((out.weights > 0).sum(dim=1).double().mean())
    k = run.space.num_domains
    rows["expert forward"]["dispatched_flops_per_example"] = rows["expert forward"]["flops_per_example"] * active / k
    order = ("router forward", "selection", "expert forward", "combination")
    return {
        "batch": len(h),
        "repeats": repeats,
        "active_experts": active,
        "components": {name: rows[name] for name in order},
    }
