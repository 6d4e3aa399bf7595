"""What one trained variant is measured on: held-out text of every domain, in evaluation mode.

    per domain   mean next-token loss (nats) and perplexity exp(loss)                      (protocol 6.1)
    per layer    routing metrics of the recorded router logits (redkit_experiments.routing.hf.layer_metrics:
                 CV, MaxVio, unused rate, Gini, entropy, top-1 weight = confidence, margin)  (6.2)
                 specialisation against the token's domain (affinity D x E, purity, NMI, Jaccard)
                 Gram orthogonality: mean off-diagonal |cos| between the experts' flattened weights
                 expert entropy: normalised entropy of the expert usage (1 = every expert alike)
                 collapse: experts that receive under a tenth of their even share of assignments
    aggregated   the mean over layers of every scalar

Routing here is the model's own in evaluation mode (top-k of the recorded logits; Expert Choice and
SPECTRA's Sinkhorn act in training only), so every variant is read the same way.
"""

import math

import torch

from redkit_experiments.routing.hf import layer_metrics
from redkit_experiments.routing.specialisation import gram, off_diagonal_mean, specialisation_metrics
from redkit_experiments.routing.token.replace import moe_blocks
from redkit_experiments.routing.token.spectra import expert_weights
from redkit_experiments.spectra.corpus import DOMAINS, Corpus, heldout_batches
from redkit_experiments.spectra.train import lm_loss

COLLAPSE_SHARE = 0.1  # an expert under 10% of its even share of assignments has collapsed
LAYER_SCALARS = (
    "cv",
    "max_vio",
    "unused_rate",
    "gini",
    "gram_ortho",
    "jaccard_mean",
    "entropy",
    "top1_weight",
    "margin",
    "purity",
    "nmi",
    "expert_entropy",
    "collapse_rate",
)


def usage_entropy(load: list[float]) -> float:
    p = torch.tensor(load, dtype=torch.float64)
    p = p / p.sum().clamp(min=1e-12)
    return float(-torch.special.xlogy(p, p).sum() / math.log(len(p)))


def collapse_rate(load: list[float]) -> float:
    p = torch.tensor(load, dtype=torch.float64)
    return float((p / p.sum().clamp(min=1e-12) < COLLAPSE_SHARE / len(p)).double().mean())


def gram_orthogonality(model) -> list[float]:
    """Per MoE layer: mean off-diagonal |cos| between the experts' flattened weights."""
    num_experts = model.config.num_local_experts
    return [off_diagonal_mean(gram(list(expert_weights(block.experts, num_experts)))) for block in moe_blocks(model)]


@torch.no_grad()
def measure(model, corpus: Corpus, length: int, sequences: int, chunk: int = 8) -> dict:
    model.eval()
    device = next(model.parameters()).device
    top_k = model.config.num_experts_per_tok
    num_experts = model.config.num_local_experts
    per_domain, logits_per_layer, domains = {}, None, []
    for ids, d in heldout_batches(corpus, length, sequences):
        total, count = 0.0, 0
        for start in range(0, len(ids), chunk):
            part = ids[start : start + chunk].to(device)
            out = model(input_ids=part, output_router_logits=True)
            total += float(lm_loss(out.logits, part)) * part[:, 1:].numel()
            count += part[:, 1:].numel()
            layers = [z.float().cpu() for z in out.router_logits]
            logits_per_layer = (
                layers if logits_per_layer is None else [torch.cat([a, b]) for a, b in zip(logits_per_layer, layers)]
            )
            domains.append(torch.full((part.numel(),), d))
        per_domain[DOMAINS[d]] = {"loss": total / count, "perplexity": math.exp(total / count), "tokens": count}
    domains = torch.cat(domains)
    layers = layer_metrics(tuple(logits_per_layer), top_k)
    for row, orthogonality in zip(layers, gram_orthogonality(model)):
        selected = row.pop("_selected")
        spec = specialisation_metrics(selected, domains, num_experts, len(DOMAINS))
        row.update({key: spec[key] for key in ("affinity", "purity", "nmi", "jaccard_mean")})
        row.update(
            {
                "gram_ortho": orthogonality,
                "expert_entropy": usage_entropy(row["load_topk"]),
                "collapse_rate": collapse_rate(row["load_topk"]),
            }
        )
    mean = {key: float(sum(r[key] for r in layers) / len(layers)) for key in LAYER_SCALARS}
    loss = sum(v["loss"] for v in per_domain.values()) / len(per_domain)
    model.train()
    return {"per_domain": per_domain, "loss": loss, "perplexity": math.exp(loss), "layers": layers, "mean": mean}
