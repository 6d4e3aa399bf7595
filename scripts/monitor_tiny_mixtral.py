"""RoutingMonitor on a Hugging Face MoE, end to end: a tiny randomly initialised Mixtral trained for a
few steps by transformers' Trainer, routing metrics per layer logged every N steps, then printed.

    python scripts/monitor_tiny_mixtral.py [--steps 20] [--every 5] [--out runs/tiny-mixtral]

Swap in any MoE that returns router logits (Mixtral, Qwen-MoE, OLMoE) and your own data: the monitor
only needs the model and a fixed probe batch.
"""

import argparse
import json
from pathlib import Path

import torch
from transformers import MixtralConfig, MixtralForCausalLM, Trainer, TrainingArguments

from redkit_experiments.routing.hf import RoutingMonitor, dynamics_figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs/tiny-mixtral"))
    args = parser.parse_args()

    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        router_aux_loss_coef=0.02,
    )
    model = MixtralForCausalLM(config)
    gen = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (8 * args.steps, 12), generator=gen)]
    probe = {"input_ids": torch.randint(0, 64, (8, 12), generator=gen)}  # (8, 12): 96 routed tokens per layer
    monitor = RoutingMonitor(probe, args.out / "log.jsonl", every=args.every)
    training = TrainingArguments(
        output_dir=str(args.out / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
    )
    Trainer(model=model, args=training, train_dataset=data, callbacks=[monitor]).train()

    keys = ("cv", "max_vio", "gini", "unused_rate", "entropy", "top1_weight", "margin", "z_loss")
    for row in monitor.rows:
        for layer, metrics in enumerate(row["layers"]):
            shown = " ".join(f"{k}={metrics[k]:.3f}" for k in keys if k in metrics)
            print(f"step {row['step']:3d} layer {layer}: load_topk={metrics['load_topk']} {shown}")
        for layer, stability in enumerate(row.get("vs_previous", [])):
            print(f"          layer {layer} vs previous: {json.dumps({k: round(v, 3) for k, v in stability.items()})}")
    print(f"wrote {args.out / 'log.jsonl'} and {dynamics_figure(args.out / 'log.jsonl', args.out / 'dynamics.png')}")


if __name__ == "__main__":
    main()
