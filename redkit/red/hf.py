"""RED around any Hugging Face AutoModel: token ids -> pooled h -> REDModel, with a loss when
labels are given, so that `transformers.Trainer` trains it as it trains any classifier.

    model = redkit.get_red_model(AutoModel.from_pretrained(PATH), REDConfig(...))   # as peft's get_peft_model
    out = model(input_ids, attention_mask, labels=y)        # out.loss, out.logits (B, C), out.alpha (B, K)

As with peft, the wrapped model is frozen; `model.red.train_part(part)` chooses what trains and
which loss `labels` (or `domains`, for the router) give: C, one expert alone, the router, or all.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

from redkit.backbone.model import pool
from redkit.errors import RedkitError
from redkit.red.config import REDConfig
from redkit.red.model import REDModel


@dataclass
class REDSequenceOutput(ModelOutput):
    loss: torch.Tensor | None = None  # () the training part's loss, where labels / domains were given
    logits: torch.Tensor | None = None  # (B, C)
    alpha: torch.Tensor | None = None  # (B, K)
    updates: torch.Tensor | None = None  # (B, K, d)
    hidden: torch.Tensor | None = None  # (B, d) pooled h


class REDForSequenceClassification(nn.Module):
    def __init__(self, encoder: nn.Module, red: REDModel, tokenizer=None, max_length: int = 64):
        super().__init__()
        hidden_size = encoder.config.hidden_size
        if hidden_size != red.config.dim:
            raise RedkitError(f"the model's hidden size is {hidden_size}, the RED config's dim {red.config.dim}")
        self.encoder, self.red = encoder, red
        self.tokenizer, self.max_length = tokenizer, max_length

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) ids -> (B, d) pooled h (config.pooling over the last hidden states)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return pool(states, attention_mask, self.red.config.pooling)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        domains: torch.Tensor | None = None,
    ) -> REDSequenceOutput:
        h = self.features(input_ids, attention_mask)
        out = self.red(h)
        part = self.red.training_part
        given = domains if part == "router" else labels
        loss = self.red.part_loss(part, h, labels, domains) if given is not None else None
        return REDSequenceOutput(loss, out.logits, out.alpha, out.updates, h)

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        if self.tokenizer is None:
            raise RedkitError("this RED model was built without a tokenizer; tokenize the texts yourself")
        enc = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        device = next(self.parameters()).device
        return {"input_ids": enc["input_ids"].to(device), "attention_mask": enc["attention_mask"].to(device)}


def get_red_model(model: nn.Module, config: REDConfig | REDModel, tokenizer=None) -> REDForSequenceClassification:
    """A RED model on top of `model` (any HF AutoModel), as peft's get_peft_model: the model is frozen,
    the RED parts are trainable (`red.train_part` picks one)."""
    red = config if isinstance(config, REDModel) else REDModel(config)
    model.requires_grad_(False)
    return REDForSequenceClassification(model, red, tokenizer)
