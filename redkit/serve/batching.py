"""Dynamic batching: requests queue up; one worker runs them together on the model, one batch at a time.

- A batch takes whole requests, oldest first, up to `max_batch` texts; a request is never split, so all of
  its answers come from the same predictor snapshot.
- After the first request arrives the worker waits at most `max_wait_s` for more (less if the batch fills).
  Requests that arrive while the model is busy are simply waiting in the queue for the next batch.
- The model runs in a dedicated single thread, so the event loop keeps parsing and answering HTTP meanwhile.
- Backpressure: more than `max_queue` waiting texts -> 503 with Retry-After, instead of unbounded latency.
- A failing batch is retried request by request (same snapshot), so only the request that breaks the model gets a 500.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from redkit.serve.errors import ApiError
from redkit.serve.state import Loaded

log = logging.getLogger("redkit.serve")

Answer = tuple[list[dict], Loaded]  # one prediction per text (BundlePredictor.predict), and who made them


@dataclass
class _Job:
    texts: list[str]
    future: asyncio.Future[Answer]


class Batcher:
    def __init__(
        self,
        snapshot: Callable[[], Loaded],
        *,
        max_batch: int,
        max_wait_s: float,
        max_queue: int,
        on_batch: Callable[[int], None] = lambda n: None,
    ) -> None:
        self._snapshot, self._on_batch = snapshot, on_batch
        self.max_batch, self.max_wait_s, self.max_queue = max_batch, max_wait_s, max_queue
        self._pending: deque[_Job] = deque()
        self._pending_texts = 0
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="redkit-model")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="redkit-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        while self._pending:
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_exception(ApiError(503, "server is shutting down", code="shutting_down"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, texts: list[str]) -> Answer:
        """The predictions for `texts` (in order) and the predictor snapshot that made them."""
        if self._task is None or self._task.done():
            raise ApiError(503, "batcher is not running", code="not_ready")
        if self._pending_texts + len(texts) > self.max_queue:
            raise ApiError(503, "server is overloaded, retry later", code="overloaded", headers={"Retry-After": "1"})
        job = _Job(texts, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._pending_texts += len(texts)
        self._wakeup.set()
        return await job.future  # cancelled with the request: the worker then skips the job

    async def _run(self) -> None:
        while True:
            await self._wait_for_batch()
            batch = self._take_batch()
            if batch:
                try:
                    await self._execute(batch)
                except Exception:  # never let the worker die: every later request would hang
                    log.exception("batch failed unexpectedly")

    async def _wait_for_batch(self) -> None:
        while not self._pending:
            self._wakeup.clear()
            await self._wakeup.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while self._pending_texts < self.max_batch and (remaining := deadline - loop.time()) > 0:
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                break

    def _take_batch(self) -> list[_Job]:
        batch: list[_Job] = []
        size = 0
        while self._pending:
            job = self._pending[0]
            if batch and not job.future.done() and size + len(job.texts) > self.max_batch:
                break  # stays first in line for the next batch
            self._pending.popleft()
            self._pending_texts -= len(job.texts)
            if not job.future.done():  # done here = cancelled by a client that went away
                batch.append(job)
                size += len(job.texts)
        return batch

    async def _execute(self, batch: list[_Job], loaded: Loaded | None = None) -> None:
        loaded = loaded or self._snapshot()  # ONE predictor for the whole batch, even if an admin swaps meanwhile
        texts = [text for job in batch for text in job.texts]
        try:
            outputs = await self._predict(loaded, texts)
        except Exception:
            if len(batch) > 1:  # one bad request must not fail its neighbours: retry each alone, same snapshot
                log.warning("a batch of %d requests failed; retrying them one by one", len(batch))
                for job in batch:
                    await self._execute([job], loaded)
                return
            log.exception("prediction failed for a request of %d texts", len(texts))
            if not batch[0].future.done():
                batch[0].future.set_exception(ApiError(500, "prediction failed", code="model_error"))
            return
        start = 0
        for job in batch:
            end = start + len(job.texts)
            if not job.future.done():
                job.future.set_result((outputs[start:end], loaded))
            start = end

    async def _predict(self, loaded: Loaded, texts: list[str]) -> list[dict]:
        self._on_batch(len(texts))
        outputs = await asyncio.get_running_loop().run_in_executor(self._executor, loaded.predictor.predict, texts)
        if len(outputs) != len(texts):
            raise RuntimeError(f"predictor returned {len(outputs)} predictions for {len(texts)} texts")
        return outputs
