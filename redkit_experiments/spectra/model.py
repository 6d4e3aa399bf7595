"""The tiny Mixtral of `redkit reproduce spectra` (a few million parameters, top-2, byte vocabulary)
and the router variants trained on it.

Every variant starts from the same initial weights: the model is built under the run's seed, and a
variant's router (`replace_router`) is made after, from the generator state that follows, so only
the router differs. `stock` keeps transformers' own gate.
"""

from dataclasses import dataclass, field

import torch
from transformers import MixtralConfig, MixtralForCausalLM

from redkit.errors import RedkitError
from redkit_experiments.spectra.corpus import VOCAB


@dataclass
class ModelConfig:
    # "A few million parameters" sized for 2 CPU cores: 3.38M. Measured alone on this machine's 2
    # threads, 12 x 128 bytes per training step: 0.17 s with the stock gate or Switch top-2, 0.28 s
    # with Expert Choice, 0.39 s with SPECTRA (one thread: 0.26 / 0.28 / 0.44 / 0.52 s).
    hidden: int = 128
    intermediate: int = 256  # per expert
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    experts: int = 8  # E
    top_k: int = 2
    length: int = 128  # T
    aux_coef: float = 0.02  # the model's load-balancing loss weight (Mixtral's default), for routers that use it

    def __post_init__(self) -> None:
        if self.experts < 2:
            raise RedkitError(f"--experts {self.experts}: a mixture needs at least 2 experts")
        if self.top_k > self.experts:
            raise RedkitError(f"top-k {self.top_k} is more than the {self.experts} experts")


@dataclass(frozen=True)
class Variant:
    """One row of the experiment: a token router of the zoo and its options."""

    name: str  # the table's row label
    router: str  # "stock" or a TOKEN_ROUTERS name
    options: dict = field(default_factory=dict, hash=False)


SPECTRA_ABLATIONS = (
    Variant("spectra", "spectra"),
    Variant("spectra -expression", "spectra", {"expression": False}),
    Variant("spectra -gru", "spectra", {"gru": "none"}),
    Variant("spectra +gru layers", "spectra", {"gru": "both"}),
    Variant("spectra -speciality", "spectra", {"speciality_weight": 0.0}),
    Variant("spectra -ortho", "spectra", {"ortho_weight": 0.0}),
    Variant("spectra -sinkhorn", "spectra", {"sinkhorn": False}),
    Variant(
        "spectra -all",
        "spectra",
        {"expression": False, "gru": "none", "speciality_weight": 0.0, "ortho_weight": 0.0, "sinkhorn": False},
    ),
)
BASELINES = (
    Variant("stock (dense top-2)", "stock"),
    Variant("switch top-1", "switch"),
    Variant("switch top-2", "top2"),
    Variant("expert choice", "expert_choice"),
    Variant("loss-free", "loss_free"),
)
VARIANTS = BASELINES + SPECTRA_ABLATIONS
VARIANT_NAMES = {v.name: v for v in VARIANTS}


def tiny_mixtral(config: ModelConfig, seed: int) -> MixtralForCausalLM:
    torch.manual_seed(seed)
    hf = MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=config.hidden,
        intermediate_size=config.intermediate,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads,
        num_local_experts=config.experts,
        num_experts_per_tok=config.top_k,
        max_position_embeddings=config.length,
        router_aux_loss_coef=config.aux_coef,
        tie_word_embeddings=True,
    )
    return MixtralForCausalLM(hf)


def build_model(config: ModelConfig, variant: Variant, seed: int) -> MixtralForCausalLM:
    model = tiny_mixtral(config, seed)
    if variant.router != "stock":
        from redkit_experiments.routing import replace_router

        replace_router(model, variant.router, **variant.options)
    return model


def uses_model_balance_loss(model) -> bool:
    """Stock gates and the dense token router train with the model's load-balancing loss."""
    from redkit_experiments.routing.token import token_routers

    routers = token_routers(model)
    return not routers or routers[0].uses_model_balance_loss
