"""The torch device a run's config names, checked: a config edited by hand or written on a GPU
machine and opened on a CPU one should say so in one line, not fail deep inside torch."""

import torch

from redkit.errors import RedkitError


def resolve_device(name: object, where: str) -> torch.device:
    """torch.device(`name`), refusing a malformed name or a device this machine does not have;
    `where` names the setting ("runs/x/config.json: field 'device'")."""
    if not isinstance(name, str):
        raise RedkitError(f"{where} must be a string such as 'cpu' or 'cuda', got {name!r:.60}")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise RedkitError(f"{where} = {name[:60]!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RedkitError(
            f"{where} = {name!r}, but this torch sees no CUDA GPU; use --device cpu "
            '(or set "device": "cpu" in the run\'s config.json)'
        )
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise RedkitError(f"{where} = {name!r}, but this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RedkitError(f"{where} = {name!r}, but MPS is not available here; use --device cpu")
    return device
