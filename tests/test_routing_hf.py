"""RoutingMonitor on a tiny randomly initialised Mixtral, through a few training steps: per-layer
metrics from the router logits, padding excluded, one JSON line per measurement, stability against
the previous measurement, and the dynamics figure."""

import json

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM, TrainerControl, TrainerState

from redkit.errors import RedkitError
from redkit_experiments.routing.hf import RoutingMonitor, dynamics_figure, layer_metrics

K, TOP_K, LAYERS = 4, 2, 2


def _model():
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=K,
        num_experts_per_tok=TOP_K,
        max_position_embeddings=64,
        router_aux_loss_coef=0.02,
    )
    return MixtralForCausalLM(config)


def test_layer_metrics_over_router_logits_skip_padding():
    model = _model().eval()
    ids = torch.randint(0, 64, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 6:] = 0  # 4 padding positions
    out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
    assert len(out.router_logits) == LAYERS and out.router_logits[0].shape == (30, K)
    layers = layer_metrics(out.router_logits, TOP_K, mask)
    assert len(layers) == LAYERS and layers[0]["n"] == 26 and sum(layers[0]["load_topk"]) == 26 * TOP_K
    assert 0 <= layers[0]["entropy"] <= 1 and layers[0]["k"] == TOP_K
    with pytest.raises(RedkitError, match="shapes do not match"):
        layer_metrics(out.router_logits, TOP_K, mask[:, :5])
    with pytest.raises(RedkitError, match="output_router_logits=True"):
        layer_metrics((), TOP_K)


@pytest.mark.slow
def test_monitor_through_a_few_training_steps(tmp_path):
    model = _model()
    gen = torch.Generator().manual_seed(1)
    probe = {
        "input_ids": torch.randint(0, 64, (4, 12), generator=gen),
        "attention_mask": torch.ones(4, 12, dtype=torch.long),
    }
    monitor = RoutingMonitor(probe, tmp_path / "log.jsonl", every=2)
    # TrainingArguments needs `accelerate`, which redkit does not depend on; the callback reads no argument
    args, state, control = None, TrainerState(), TrainerControl()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for step in range(1, 7):  # the Trainer's loop, reduced: step, then on_step_end with the model
        ids = torch.randint(0, 64, (8, 12), generator=gen)
        loss = model(input_ids=ids, labels=ids, output_router_logits=True).loss  # includes the aux loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        state.global_step = step
        monitor.on_step_end(args, state, control, model=model)
    assert model.training  # the monitor put it back
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6] and all(len(r["layers"]) == LAYERS for r in rows)
    assert "vs_previous" not in rows[0] and len(rows[1]["vs_previous"]) == LAYERS
    assert 0 <= rows[2]["vs_previous"][0]["saturation"] <= 1 and rows[0]["mean"]["cv"] >= 0
    assert rows[0]["layers"][0]["n"] == 48 and rows[0]["top_k"] == TOP_K
    again = RoutingMonitor(probe, tmp_path / "again.jsonl").measure(model, 6)  # same weights, same probe
    assert again["layers"][0]["load_topk"] == rows[2]["layers"][0]["load_topk"]
    assert dynamics_figure(tmp_path / "log.jsonl", tmp_path / "figures" / "dynamics.png").stat().st_size > 1000


@pytest.mark.slow
def test_monitor_inside_a_real_trainer(tmp_path):
    pytest.importorskip("accelerate")  # the Trainer needs it; redkit does not
    from transformers import Trainer, TrainingArguments

    model = _model()
    gen = torch.Generator().manual_seed(2)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (16, 12), generator=gen)]
    probe = {"input_ids": torch.randint(0, 64, (2, 12), generator=gen)}
    monitor = RoutingMonitor(probe, tmp_path / "log.jsonl", every=2)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
    )
    Trainer(model=model, args=args, train_dataset=data, callbacks=[monitor]).train()
    assert [r["step"] for r in monitor.rows] == [2, 4]
