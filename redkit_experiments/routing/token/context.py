"""What the token routers of one model share during a forward pass.

Inside a transformers sparse-MoE block the gate sees only the flattened hidden states
(B * T, d): neither the batch's shape nor its padding. A token router needs both (a GRU runs along
the sequence; capacity, Sinkhorn and Expert Choice must count real tokens only), and SPECTRA's
routing state may be carried from one MoE layer to the next. `replace_router` installs two
forward pre-hooks that fill one `RoutingContext` per model:

    on every PreTrainedModel inside the model   attention_mask (B, T_total) of the call, or None;
                                                the cross-layer state is reset
    on every MoE block                          the (B, T) of the hidden states it is given

Nothing here changes what the blocks compute or return.
"""

import torch


class RoutingContext:
    def __init__(self) -> None:
        self.attention_mask: torch.Tensor | None = None  # (B, T_total) 1 = real token
        self.shape: tuple[int, int] | None = None  # (B, T) of the block being routed
        self.layer_state: torch.Tensor | None = None  # (B * T, H) routing state of the previous MoE layer

    def on_model_call(self, module, args, kwargs) -> None:
        mask = kwargs.get("attention_mask")
        self.attention_mask = mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        self.layer_state = None

    def on_block_call(self, module, args) -> None:
        hidden = args[0]
        self.shape = (hidden.shape[0], hidden.shape[1]) if hidden.dim() == 3 else None

    def batch_shape(self, n: int) -> tuple[int, int]:
        """(B, T) of the n = B * T flattened rows being routed; (1, n) when unknown."""
        if self.shape is not None and self.shape[0] * self.shape[1] == n:
            return self.shape
        return (1, n)

    def real_tokens(self, n: int, device: torch.device) -> torch.Tensor:
        """(n,) bool: which flattened rows are real tokens (not padding). With a KV cache the mask
        covers past tokens too; the last T columns are this call's."""
        b, t = self.batch_shape(n)
        mask = self.attention_mask
        if mask is None or mask.shape[0] != b or mask.shape[1] < t:
            return torch.ones(n, dtype=torch.bool, device=device)
        return mask[:, -t:].reshape(-1).to(device=device, dtype=torch.bool)
