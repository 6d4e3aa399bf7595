"""Routing metrics for any Hugging Face MoE model that returns router logits (Mixtral, Qwen-MoE,
OLMoE: `output_router_logits=True`), per layer.

    layer_metrics(router_logits, top_k, attention_mask)   a plain function over one batch's logits:
        router_logits  tuple over MoE layers of (batch * seq, K) logits (what the models return)
        attention_mask (batch, seq) or None: padding positions are not routing decisions
        -> [per layer: routing_metrics of softmax(logits) with the model's top-k]
    RoutingMonitor(probe, log_path, every)                 a transformers TrainerCallback: every
        `every` optimizer steps, routes a fixed probe batch (no gradients, eval mode, then back) and
        appends one JSON line per measurement to log_path: per-layer metrics, their mean over layers,
        and per layer the stability against the previous measurement (agreement, saturation, Kendall τ)

`dynamics_figure(log_path, png)` plots entropy, CV and MaxVio against the step, one line per layer.
"""

import json
from pathlib import Path

import torch
from transformers import TrainerCallback

from redkit.errors import RedkitError
from redkit.jsonfile import jsonl_objects
from redkit_experiments.routing.metrics import routing_metrics
from redkit_experiments.routing.stability import stability_metrics

SCALARS = ("entropy", "cv", "max_vio", "gini", "unused_rate", "over_capacity", "top1_weight", "margin", "z_loss")


def _decisions(logits: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(batch * seq, K) logits of the real (unpadded) tokens."""
    logits = logits.detach().float().cpu()
    if attention_mask is None:
        return logits
    keep = attention_mask.reshape(-1).bool().cpu()
    if len(keep) != len(logits):
        raise RedkitError(
            f"router logits have {len(logits)} rows but the attention mask covers {len(keep)} tokens: "
            "shapes do not match"
        )
    return logits[keep]


def layer_metrics(
    router_logits, top_k: int, attention_mask: torch.Tensor | None = None, capacity_factor: float = 1.25
) -> list[dict]:
    """Routing metrics of every MoE layer of one batch (see the module docstring)."""
    if not router_logits:
        raise RedkitError("no router logits: call the model with output_router_logits=True")
    out = []
    for logits in router_logits:
        z = _decisions(logits, attention_mask)
        selected = z.topk(top_k, dim=-1).indices
        out.append(
            routing_metrics(
                torch.softmax(z, dim=-1), k=top_k, selected=selected, logits=z, capacity_factor=capacity_factor
            )
            | {"_selected": selected}
        )
    return out


def mean_over_layers(layers: list[dict]) -> dict:
    return {key: float(sum(m[key] for m in layers) / len(layers)) for key in SCALARS if key in layers[0]}


class RoutingMonitor(TrainerCallback):
    def __init__(
        self,
        probe: dict,
        log_path: str | Path,
        every: int = 10,
        top_k: int | None = None,
        capacity_factor: float = 1.25,
    ):
        """`probe`: model inputs (input_ids, attention_mask) of a fixed batch to route at every measurement."""
        self.probe, self.log_path, self.every = probe, Path(log_path), every
        self.top_k, self.capacity_factor = top_k, capacity_factor
        self.previous: list[torch.Tensor] | None = None
        self.rows: list[dict] = []

    @torch.no_grad()
    def measure(self, model, step: int) -> dict:
        training = model.training
        model.eval()
        try:
            device = next(model.parameters()).device
            inputs = {k: v.to(device) for k, v in self.probe.items()}
            out = model(**inputs, output_router_logits=True)
        finally:
            model.train(training)
        top_k = self.top_k or model.config.num_experts_per_tok
        layers = layer_metrics(out.router_logits, top_k, self.probe.get("attention_mask"), self.capacity_factor)
        selected = [m.pop("_selected") for m in layers]
        row = {"step": step, "top_k": top_k, "layers": layers, "mean": mean_over_layers(layers)}
        if self.previous is not None:
            k = len(layers[0]["load_topk"])
            row["vs_previous"] = [stability_metrics(a, b, k) for a, b in zip(self.previous, selected)]
        self.previous = selected
        self.rows.append(row)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        return row

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None and state.global_step % self.every == 0:
            self.measure(model, state.global_step)
        return control


def dynamics_figure(log_path: Path, png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from redkit.report import save_figure

    rows = [row for _, row in jsonl_objects(log_path, appended=True)]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key in zip(axes, ("entropy", "cv", "max_vio")):
        for layer in range(len(rows[0]["layers"])):
            ax.plot(
                [r["step"] for r in rows], [r["layers"][layer][key] for r in rows], marker=".", label=f"layer {layer}"
            )
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    save_figure(fig, Path(png))
    return Path(png)
