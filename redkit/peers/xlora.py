"""Does peft's X-LoRA (a trained router over frozen LoRA experts) load on the run's backbone?

Two attempts, each on a fresh copy of the backbone, each ending in one forward pass from the
frozen-prefix cache; what happened is recorded, never raised:

    as_is     get_peft_model(HF model, XLoraConfig(adapters={domain: dir}))
    wrapped   the HF model inside `HasModel` (a module exposing `.model` and `.config`), adapters
              keyed "0" .. "K-1"

Why the first fails on a BERT-style encoder (peft issue #2132): X-LoRA loads each adapter with
its own loader, which rewrites every weight key to `model.model.<path>`, assuming the base is a
*ForCausalLM whose transformer sits at `.model`; a BertModel's layers sit at `model.encoder...`
under the LoRA model, so every key is "unexpected". The wrapper supplies that `.model` level.
It also needs the adapters named "0" .. "K-1": the loader names them by position, but then
activates them by their dict keys (KeyError otherwise).
"""

import traceback
from pathlib import Path

import torch
from torch import nn

from redkit.peers.lora import LoraBackbone


class HasModel(nn.Module):
    """An encoder seen as X-LoRA expects a model: its transformer at `.model`, its config at `.config`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


def _attempt(run, directories: list[Path], wrapped: bool, batch) -> dict:
    from peft import XLoraConfig, get_peft_model

    lb = LoraBackbone(run)
    lb.base_model.config.use_cache = False  # X-LoRA refuses a model that caches keys and values
    keys = [str(i) for i in range(len(directories))] if wrapped else list(run.space.domains)
    config = XLoraConfig(hidden_size=lb.backbone.hidden_size, adapters={k: str(d) for k, d in zip(keys, directories)})
    try:
        model = get_peft_model(HasModel(lb.base_model) if wrapped else lb.base_model, config)
        model.eval()
        lb.backbone.model = model
        with torch.no_grad():
            h = lb.features(batch)
        scalings = model.get_latest_scalings()
        return {"loads": True, "forward": True, "pooled_shape": list(h.shape),
                "scalings_shape": list(scalings.shape) if scalings is not None else None}
    except Exception as err:  # noqa: BLE001 -- recording peft's failure is the point
        frames = traceback.extract_tb(err.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames) if "peft" in f.filename), "")
        return {"loads": False, "error": f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}", "where": where}


def try_xlora(run, directories: list[Path], batch) -> dict:
    """{"as_is": outcome, "wrapped": outcome}, each {"loads": bool, ...}, for the note of the table."""
    return {"as_is": _attempt(run, directories, wrapped=False, batch=batch),
            "wrapped": _attempt(run, directories, wrapped=True, batch=batch)}
