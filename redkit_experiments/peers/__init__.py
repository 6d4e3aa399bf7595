"""redkit side by side with Hugging Face peft: RED's experts inside the backbone as LoRA adapters,
and peft's own ways of combining independently trained adapters, on the same run.

    lora.py          the expert kind `lora`: one peft LoRA adapter per domain in the top-N layers
    train.py         training one LoRA expert alone on its domain, through the frozen classifier C
    mixing.py        per-example weights α over the adapters' updates, inside every LoRA layer
    arrow.py         peft's Arrow (training-free routing), with its per-example routing recorded
    compositions.py  lora_oracle, lora_red, lora_uniform, lora_merge_linear, lora_merge_ties, lora_arrow
    xlora.py         whether peft's X-LoRA loads on the run's backbone (and why not)
    benchmark.py     `redkit reproduce peers`: one table, pooled compositions beside the LoRA ones

Axes: B batch, T tokens, d hidden size, K experts (domains), C classes, E Arrow experts (= K).

peft is an optional dependency (`pip install redkit[peft]`); only this package imports it, and
only through `require_peft`, so the rest of redkit never needs it.
"""

from redkit.errors import RedkitError

MIN_PEFT = (0, 18)  # ArrowConfig / create_arrow_model first shipped in peft 0.18


def require_peft():
    """The peft module, or one clear line saying how to get it."""
    try:
        import peft
    except ImportError:
        raise RedkitError("the peft comparison needs peft: pip install 'redkit[peft]' (peft >= 0.18)") from None
    version = tuple(int(p) for p in peft.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_PEFT:
        raise RedkitError(
            f"peft {peft.__version__} is too old for the peft comparison (Arrow needs peft >= 0.18): "
            "pip install -U 'redkit[peft]'"
        )
    return peft
