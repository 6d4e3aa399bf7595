"""Token routers inside a tiny 2-layer Mixtral (and Qwen3-MoE / OLMoE): replace_router keeps
transformers' contract (router logits, aux loss, RoutingMonitor), the stock router comes back bit for
bit, padding is never a routing decision, gradients reach every router, Expert Choice keeps its
capacity, and bad input is one RedkitError line."""

import pytest
import torch
from torch import nn
from transformers import (
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from redkit.errors import RedkitError
from redkit_experiments.routing import replace_router, router_aux_loss
from redkit_experiments.routing.hf import RoutingMonitor
from redkit_experiments.routing.token import TOKEN_ROUTERS, token_routers
from redkit_experiments.routing.token.spectra import packed_gru

E, TOP_K, LAYERS, VOCAB = 4, 2, 2, 64
SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=32,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_experts_per_tok=TOP_K,
    max_position_embeddings=32,
)
ROUTERS = [
    ("dense", {}),
    ("switch", {}),
    ("top2", {}),
    ("loss_free", {}),
    ("expert_choice", {}),
    ("spectra", {}),
    ("spectra", {"gru": "both", "expression": False}),
    ("spectra", {"gru": "layers", "sinkhorn": False}),
]


def mixtral(seed: int = 0) -> MixtralForCausalLM:
    torch.manual_seed(seed)
    return MixtralForCausalLM(MixtralConfig(num_local_experts=E, router_aux_loss_coef=0.02, **SMALL))


def batch(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 10), generator=gen)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 7:] = 0  # right padding
    mask[1, :2] = 0  # left padding
    return ids, mask


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "olmoe"])
def test_dense_router_is_the_stock_router_bit_for_bit(family):
    torch.manual_seed(0)
    model = {
        "mixtral": lambda: MixtralForCausalLM(MixtralConfig(num_local_experts=E, **SMALL)),
        "qwen3_moe": lambda: Qwen3MoeForCausalLM(
            Qwen3MoeConfig(num_experts=E, moe_intermediate_size=32, norm_topk_prob=False, **SMALL)
        ),
        "olmoe": lambda: OlmoeForCausalLM(OlmoeConfig(num_experts=E, **SMALL)),
    }[family]()
    for block_gate in (m.gate for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")):
        nn.init.normal_(block_gate.weight, std=0.5)  # Qwen/OLMoE start at 0: make routing non-trivial
    model.eval()
    ids, mask = batch()
    before = model(input_ids=ids, attention_mask=mask, labels=ids, output_router_logits=True)
    replace_router(model, "dense")
    after = model(input_ids=ids, attention_mask=mask, labels=ids, output_router_logits=True)
    assert len(token_routers(model)) == LAYERS and len(after.router_logits) == LAYERS
    assert torch.equal(before.logits, after.logits) and torch.equal(before.loss, after.loss)
    assert torch.equal(before.aux_loss, after.aux_loss)
    assert all(torch.equal(a, b) for a, b in zip(before.router_logits, after.router_logits))


@pytest.mark.parametrize("name,options", ROUTERS)
def test_every_router_keeps_the_contract_and_learns(name, options):
    model = mixtral()
    ids, mask = batch()
    model(
        input_ids=ids, attention_mask=mask, output_router_logits=True
    )  # transformers' hooks installed before the swap
    replace_router(model, name, **options)
    model.train()
    out = model(input_ids=ids, attention_mask=mask, labels=ids, output_router_logits=True)
    assert out.logits.shape == (3, 10, VOCAB)
    assert len(out.router_logits) == LAYERS and all(z.shape == (30, E) for z in out.router_logits)  # recorded once each
    routers = token_routers(model)
    if name == "spectra":  # the recorded logits are the new router's: scaled cosines
        assert all(float(z.detach().abs().max()) <= routers[0].config.scale + 1e-4 for z in out.router_logits)
    assert torch.isfinite(out.aux_loss) and torch.isfinite(router_aux_loss(model))
    (out.loss + router_aux_loss(model)).backward()
    for router in routers:
        grads = [p.grad for p in router.parameters()]
        assert grads and all(g is not None for g in grads) and any(float(g.abs().sum()) > 0 for g in grads)
    rows = RoutingMonitor({"input_ids": ids, "attention_mask": mask}, "/dev/null").measure(model, 0)
    assert len(rows["layers"]) == LAYERS and rows["layers"][0]["n"] == int(mask.sum()) and model.training


def test_expert_choice_respects_capacity_and_skips_padding():
    model = mixtral()
    replace_router(model, "expert_choice", capacity_factor=1.0)
    ids, mask = batch()
    model.train()
    seen = []
    router = token_routers(model)[0]
    router.register_forward_hook(lambda m, a, out: seen.append(out))
    model(input_ids=ids, attention_mask=mask)
    _, weights, index = seen[0]
    real = int(mask.sum())
    cap = -(-real * TOP_K // E)  # ⌈c n k / E⌉, c = 1
    chosen = index[weights > 0]
    assert index.shape[0] == 30 and bool((index < E).all()) and 0 < len(chosen) <= cap * E
    assert int(torch.bincount(chosen, minlength=E).max()) <= cap
    padded = ~mask.reshape(-1).bool()
    assert float(weights.detach()[padded].abs().sum()) == 0  # padding gets no expert
    assert index.shape[1] == int((weights > 0).sum(dim=1).max())  # as many slots as the busiest token needs


def test_spectra_gru_ignores_padding_on_either_side():
    torch.manual_seed(0)
    gru = nn.GRU(8, 6, batch_first=True, bias=False)
    x = torch.randn(1, 5, 8)
    alone = packed_gru(gru, x, torch.ones(1, 5, dtype=torch.bool))
    pads = torch.randn(1, 3, 8) * 100
    left = packed_gru(gru, torch.cat([pads, x], 1), torch.tensor([[False] * 3 + [True] * 5]))
    right = packed_gru(gru, torch.cat([x, pads], 1), torch.tensor([[True] * 5 + [False] * 3]))
    assert torch.allclose(left[:, 3:], alone, atol=1e-6) and torch.allclose(right[:, :5], alone, atol=1e-6)


def test_batch_level_routing_sees_real_tokens_only():
    """Switch's capacity and SPECTRA's Sinkhorn quota: the same real tokens route the same with or
    without extra padded sequences in the batch."""
    for name in ("switch", "spectra"):
        torch.manual_seed(0)
        router = TOKEN_ROUTERS[name](
            TOKEN_ROUTERS[name].Config(dim=16, num_experts=E, top_k=TOP_K if name == "spectra" else 1)
        ).train()
        x = torch.randn(2, 6, 16)
        router.context.shape = (2, 6)
        _, w_alone, i_alone, _ = router.route_tokens(x.reshape(-1, 16), torch.ones(12, dtype=torch.bool))
        padded = torch.cat([x, torch.randn(1, 6, 16) * 50])
        router.context.shape = (3, 6)
        real = torch.tensor([True] * 12 + [False] * 6)
        _, w_pad, i_pad, _ = router.route_tokens(padded.reshape(-1, 16), real)
        assert torch.equal(i_alone, i_pad[:12]) and torch.allclose(w_alone, w_pad[:12])


def test_bad_input_is_one_line():
    model = mixtral()
    with pytest.raises(RedkitError, match="did you mean 'spectra'"):
        replace_router(model, "spectre")
    with pytest.raises(RedkitError, match="unknown option.*gru_layers"):
        replace_router(model, "spectra", gru_layers=2)
    with pytest.raises(RedkitError, match="gru='sideways'"):
        replace_router(model, "spectra", gru="sideways")
    with pytest.raises(RedkitError, match="come from the model"):
        replace_router(model, "switch", num_experts=3)
    with pytest.raises(RedkitError, match="no sparse-MoE blocks"):
        replace_router(nn.Sequential(nn.Linear(4, 4)), "dense")
    assert not token_routers(model)  # nothing was replaced by the failed calls
