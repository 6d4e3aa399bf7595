"""Two pure-ASGI middlewares: the request body size limit and HTTP metrics.

Pure ASGI (not BaseHTTPMiddleware) so they add no task per request and never buffer bodies.
"""

from __future__ import annotations

import time

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from redkit.serve.errors import ApiError, error_response
from redkit.serve.metrics import ServerMetrics

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


DRAIN_BYTES = 64 * 2**20  # of a body over the limit, read and discarded before the 413 (see BodyLimitMiddleware)


async def drain(receive: Receive, budget: int) -> None:
    """Read and discard the request body to its end (or the client's disconnect), at most `budget` bytes."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class BodyLimitMiddleware:
    """413 for bodies over `max_body_bytes`, without ever holding more than that (plus one chunk).

    - Content-Length over the limit: answered before routing; the app never sees the body.
    - No Content-Length (chunked): bytes are counted as the app reads them; the read that crosses the limit
      raises ApiError(413), which the app's error handler turns into the usual JSON error.

    Either way the rest of the body is first read and discarded, up to DRAIN_BYTES: a client that sent
    `Connection: close` (Python's urllib) is still writing when the answer comes, and a server that answers and
    closes then resets the connection under it, so the client saw a broken pipe instead of the 413 (half the
    tries with a 2 MB body). Past DRAIN_BYTES the server answers anyway: it never reads without bound.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, larger: dict[tuple[str, str], int] | None = None) -> None:
        # larger: {(method, path): its own limit}, for a route that takes files (an owner's upload, admin only)
        self.app, self.max_body_bytes, self.larger = app, max_body_bytes, larger or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get((scope["method"], scope["path"]), self.max_body_bytes)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            if int(declared) <= DRAIN_BYTES:
                await drain(receive, DRAIN_BYTES)
            response = error_response(413, f"request body is over {limit} bytes")
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if message.get("more_body", False):
                        await drain(receive, DRAIN_BYTES - received)
                    raise ApiError(413, f"request body is over {limit} bytes")
            return message

        await self.app(scope, limited_receive, send)


class MetricsMiddleware:
    """Counts every HTTP request by route template (not raw path: bounded label cardinality) and times it."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # if the app raises before answering, ServerErrorMiddleware (outside us) sends a 500

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route = getattr(scope.get("route"), "path", None) or "<unmatched>"
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            self.metrics.requests.inc(route, method, str(status))
            self.metrics.latency.observe(time.perf_counter() - start, route)
