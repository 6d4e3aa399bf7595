"""One CPU thread for tiny models.

The toy models, and every module trained on cached features (experts, heads, routers, gates), do
little arithmetic per step: handing it out to several threads costs more than it saves, and on a
shared machine whose cores are busy it is far worse (measured on 2 busy cores: a 128 -> 10 head's epoch took 7.5 s on
2 threads, 0.08 s on 1). So their training runs on one thread, and the setting is restored after.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch on `count` CPU threads within the block (None or 0: as it is), restored after."""
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_thread():
    return torch_threads(1)
