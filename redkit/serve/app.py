"""The application factory: `create_app(predictor_factory, ...)` -> a FastAPI app.

    POST /v1/predict   {"texts": [...]} -> per text: label, probability, weights by domain, out_of_scope
    GET  /health       200 once the model is loaded (503 before, or if loading failed)
    GET  /v1/info      run, labels, domains, backbone fingerprint, version
    GET  /metrics      Prometheus text: requests, latency histogram, batch sizes
    POST /v1/domains, DELETE /v1/domains/{name}   with --admin-token only (redkit/serve/admin.py); owners' own
                       tokens (--owner-tokens) upload and remove their own domains only

Everything per-server (model state, batcher, metrics) is created per app (no module globals), so tests
can run several apps in one process and uvicorn workers each build their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from redkit.bundle.manifest import redkit_version
from redkit.federated.upload import SIZE_LIMIT
from redkit.serve.admin import install_admin_routes
from redkit.serve.batching import Batcher
from redkit.serve.errors import install_error_handlers
from redkit.serve.metrics import CONTENT_TYPE, ServerMetrics
from redkit.serve.middleware import BodyLimitMiddleware, MetricsMiddleware
from redkit.serve.predictor import BundlePredictor
from redkit.serve.schema import PredictRequest, PredictResponse, check_texts, read_json
from redkit.serve.state import ModelState
from redkit.serve.tokens import MIN_LENGTH


def create_app(
    predictor_factory: Callable[[], BundlePredictor],
    *,
    max_batch: int = 64,
    max_chars: int = 2000,
    max_body_bytes: int = 1_000_000,
    max_upload_bytes: int = SIZE_LIMIT,
    batch_wait_ms: float = 0,
    admin_token: str | None = None,
    max_queue: int | None = None,
    domain_changes=None,
    owner_tokens: dict[str, bytes] | None = None,
) -> FastAPI:
    """An inference server for `predictor_factory()`, which is called once, in a thread, after startup.

    max_batch: texts per request and per model call. max_queue: waiting texts before 503 (default 32 * max_batch).
    batch_wait_ms: how long a batch waits for more requests; 0 (measured best: requests that arrive while
    the model is busy form the next batch anyway). admin_token: enables POST/DELETE /v1/domains (else
    they are 404). domain_changes: what they do (redkit/serve/lifecycle.py DomainChanges). max_upload_bytes:
    the body limit of POST /v1/domains, which takes an owner's uploaded contribution (admin routes only).
    owner_tokens: {owner: sha256 of its token} (redkit/serve/tokens.py): each may upload and remove its own.
    """
    if max_batch < 1 or max_chars < 1 or max_body_bytes < 1 or batch_wait_ms < 0:
        raise ValueError("max_batch, max_chars and max_body_bytes must be >= 1, batch_wait_ms >= 0")
    if admin_token is not None and len(admin_token) < MIN_LENGTH:
        raise ValueError(f"admin_token must have at least {MIN_LENGTH} characters")
    if owner_tokens and admin_token is None:
        raise ValueError("owner_tokens need the admin routes: give an admin_token too")
    metrics = ServerMetrics(max_batch)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # uvicorn only starts listening once this yields: load in the background so /health can say 503.
        model = app.state.model = ModelState()
        batcher = app.state.batcher = Batcher(
            model.snapshot,
            max_batch=max_batch,
            max_wait_s=batch_wait_ms / 1000,
            max_queue=max_queue or 32 * max_batch,
            on_batch=metrics.batch_size.observe,
        )
        batcher.start()
        loading = asyncio.create_task(model.load(predictor_factory), name="redkit-load")
        try:
            yield
        finally:  # uvicorn has stopped accepting and drained in-flight requests by now
            loading.cancel()
            await batcher.stop()

    # redirect_slashes=False: "/v1/predict/" is a 404, not a 307 that makes clients re-send the body elsewhere.
    app = FastAPI(title="redkit", version=redkit_version(), lifespan=lifespan, redirect_slashes=False)
    install_error_handlers(app)
    uploads = {("POST", "/v1/domains"): max_upload_bytes} if admin_token is not None else {}
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes, larger=uploads)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # added last = outermost: sees the 413s too

    @app.get("/health", summary="200 once the model is loaded, 503 before (or if loading failed)")
    async def health(request: Request) -> JSONResponse:
        model: ModelState = request.app.state.model
        body: dict[str, object] = {"status": model.status}
        if model.current is not None:
            body["version"] = model.current.info["version"]
        if model.error is not None:
            body["error"] = model.error
        return JSONResponse(body, status_code=200 if model.status == "ready" else 503)

    @app.get("/v1/info", summary="Labels, domains, fingerprint and version of the current model")
    async def info(request: Request) -> JSONResponse:
        return JSONResponse(request.app.state.model.snapshot().info)

    @app.post(
        "/v1/predict",
        response_model=PredictResponse,
        summary="Classify up to max_batch texts",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": PredictRequest.model_json_schema()}},
            }
        },
    )
    async def predict(request: Request) -> Response:
        # Parsed by hand (not a FastAPI body parameter) to answer 415/400/422 distinctly, in one pydantic pass.
        body = await read_json(request, PredictRequest)
        check_texts(body.texts, max_batch=max_batch, max_chars=max_chars)
        request.app.state.model.snapshot()  # 503 now if not loaded, rather than after queueing
        predictions, loaded = await request.app.state.batcher.submit(body.texts)
        model_ref = {"version": loaded.info["version"], "fingerprint": loaded.info["fingerprint"]}
        return JSONResponse({"predictions": predictions, "model": model_ref})

    @app.get("/metrics", summary="Prometheus text exposition")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    if admin_token is not None:
        if domain_changes is None:
            raise ValueError("admin routes need domain_changes (redkit.serve.lifecycle.DomainChanges)")
        install_admin_routes(app, admin_token, domain_changes, owner_tokens, max_upload_bytes)
    return app
