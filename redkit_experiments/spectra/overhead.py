"""The routing-quality protocol's Table 9: where one MoE block's time goes with SPECTRA's router, per component, on
a training batch's hidden states (B, T, d), in training mode (Sinkhorn + quota included), no gradients.

    GRU forward            the routing state along the sequence (or its linear map without GRU)
    expression projection  the per-expert expressions
    Gram matrix            the orthogonality + speciality penalties (the aux loss)
    cosine similarity      state x expression -> logits
    top-k selection        softmax, Sinkhorn, quota, top-k, gates
    expert execution       the block's experts on the selection (transformers' own code)
    total                  the whole block forward; the gates of stock Mixtral and Switch top-2
                           are timed beside it for comparison

Times: medians of interleaved rounds on one thread (redkit_experiments.routing.overhead.interleaved_ms);
FLOPs: torch's flop counter (matrix products only; elementwise work counts 0).
"""

import torch

from redkit.threads import one_thread
from redkit_experiments.routing.overhead import interleaved_ms
from redkit_experiments.routing.token.replace import moe_blocks
from redkit_experiments.spectra.model import ModelConfig, Variant, build_model
from redkit_experiments.study.complexity import flops_per_call


@torch.no_grad()
def overhead_table(model_config: ModelConfig, batch: int, repeats: int, seed: int = 0) -> dict:
    spectra = build_model(model_config, Variant("spectra", "spectra"), seed).train()
    block = moe_blocks(spectra)[0]
    router = block.gate
    x = torch.randn(batch, model_config.length, model_config.hidden, generator=torch.Generator().manual_seed(seed))
    flat = x.reshape(-1, model_config.hidden)
    real = torch.ones(len(flat), dtype=torch.bool)
    router.context.on_block_call(block, (x,))
    s = router.state(flat, real)
    v = router.expressions(flat)
    logits = router.cosine_logits(s, v)
    weights, index = router.select(logits, real)
    stock = moe_blocks(build_model(model_config, Variant("stock", "stock"), seed))[0].gate
    top2 = moe_blocks(build_model(model_config, Variant("top2", "top2"), seed).train())[0].gate
    top2.context.on_block_call(block, (x,))
    calls = {
        "GRU forward": lambda: router.state(flat, real),
        "expression projection": lambda: router.expressions(flat),
        "Gram matrix": lambda: (router.orthogonality(), router.speciality()),
        "cosine similarity": lambda: router.cosine_logits(s, v),
        "top-k selection": lambda: router.select(logits, real),
        "expert execution": lambda: block.experts(flat, index, weights),
        "total": lambda: block(x),
        "stock gate (dense top-2)": lambda: stock(flat),
        "switch top-2 gate": lambda: top2(flat),
    }
    with one_thread():
        ms = interleaved_ms(calls, repeats, torch.device("cpu"))
    total = ms["total"]
    rows = {
        name: {"ms": ms[name], "mflops": flops_per_call(fn) / 1e6, "share": ms[name] / total}
        for name, fn in calls.items()
    }
    routing = sum(
        ms[name]
        for name in ("GRU forward", "expression projection", "Gram matrix", "cosine similarity", "top-k selection")
    )
    return {
        "batch": batch,
        "length": model_config.length,
        "repeats": repeats,
        "components": rows,
        "routing_ms": routing,
        "routing_share": routing / total,
    }
