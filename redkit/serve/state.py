"""The one mutable thing in the server: which predictor answers new batches.

`current` is a reference to a frozen `Loaded` (predictor + its info). Readers take the reference once
(a snapshot) and use only that; writers build a complete new `Loaded` off the event loop and then
rebind the reference in one assignment. So a batch, and therefore every request in it, is answered
by exactly one predictor, and nothing is ever swapped under a running batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from redkit.serve.errors import ApiError
from redkit.serve.predictor import BundlePredictor

log = logging.getLogger("redkit.serve")


@dataclass(frozen=True)
class Loaded:
    predictor: BundlePredictor
    info: dict  # BundlePredictor.info(), taken once


class ModelState:
    def __init__(self) -> None:
        self.status: Literal["loading", "ready", "failed"] = "loading"
        self.error: str | None = None
        self.current: Loaded | None = None
        self._write_lock = asyncio.Lock()  # admin changes one at a time, or concurrent adds would lose one

    async def load(self, factory: Callable[[], BundlePredictor]) -> None:
        """Build the first predictor in a worker thread, so the server answers /health (503) meanwhile."""
        try:
            self.current = await asyncio.to_thread(_build, factory)
            self.status = "ready"
            log.info("model ready: %s", self.current.info)
        except Exception as exc:  # reported by /health; the process stays up to say why
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            log.exception("model failed to load")

    def snapshot(self) -> Loaded:
        current = self.current
        if current is None:
            raise ApiError(503, f"model is {self.status}", code="not_ready", headers={"Retry-After": "1"})
        return current

    async def swap(self, change: Callable[[BundlePredictor], BundlePredictor]) -> Loaded:
        """Derive a new predictor from the current one (off the loop), then make it current atomically."""
        async with self._write_lock:
            base = self.snapshot()
            self.current = await asyncio.to_thread(_build, lambda: change(base.predictor))
            log.info("model swapped: version %s -> %s", base.info["version"], self.current.info["version"])
            return self.current


def _build(factory: Callable[[], BundlePredictor]) -> Loaded:
    predictor = factory()
    return Loaded(predictor, predictor.info())
