"""Admin routes: add and remove domains while serving, by swapping the predictor. What a change does is
given to the routes (redkit/serve/lifecycle.py DomainChanges, from redkit/serve/main.py), not imported.

Mounted only when an admin token is configured; without one they do not exist (404, like any unknown
route), so a deployment without a token has no admin surface to probe. With one, a missing or wrong
`Authorization: Bearer <token>` is 401. Tokens are compared in constant time (hmac.compare_digest on
bytes: on str it raises TypeError for non-ASCII input, which would be a 500).
"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse

from redkit.errors import RedkitError
from redkit.federated.upload import CONTENT_TYPE as UPLOAD_TYPE
from redkit.federated.upload import unpack
from redkit.serve.errors import ApiError
from redkit.serve.schema import DomainName, DomainRequest, media_type, read_json
from redkit.serve.state import ModelState

log = logging.getLogger("redkit.serve")


def bearer_auth(token: str) -> Any:
    expected = token.encode()

    async def check(request: Request) -> None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise ApiError(401, "missing or invalid admin token", headers={"WWW-Authenticate": "Bearer"})

    return check


def install_admin_routes(app: FastAPI, token: str, changes) -> None:
    """Registered on the app itself, not via include_router: in FastAPI 0.165 an included route's
    scope["route"].path lacks the router prefix, which would mislabel the metrics."""
    auth = [Depends(bearer_auth(token))]

    async def swap(request: Request, change) -> JSONResponse:
        model: ModelState = request.app.state.model
        try:
            loaded = await model.swap(change)
        except RedkitError as err:  # a foreign expert, a bundle without its run, ...: one line, nothing changed
            conflict = "serve the run" in str(err) or "adding domains is off" in str(err)
            raise ApiError(409 if conflict else 422, str(err), code="refused") from None
        return JSONResponse({"model": loaded.info})

    @app.post(
        "/v1/domains",
        dependencies=auth,
        tags=["admin"],
        summary="Add a domain: an expert by name (JSON), or an owner's contribution uploaded as a tar (hot swap)",
    )
    async def add_domain(request: Request, owner: Annotated[DomainName | None, Query()] = None) -> JSONResponse:
        if media_type(request.headers.get("content-type")) == UPLOAD_TYPE:
            if owner is None:
                raise ApiError(422, "an uploaded contribution needs ?owner=NAME", code="refused")
            body = await request.body()  # bounded by BodyLimitMiddleware (the server's --max-upload-bytes)
            try:
                files = unpack(body, f"owner {owner!r}'s upload")
            except RedkitError as err:
                raise ApiError(422, str(err), code="refused") from None
            return await swap(request, lambda p: changes.contribute(p, owner, files))
        body = await read_json(request, DomainRequest)
        return await swap(request, lambda p: changes.add(p, body.expert))

    @app.delete("/v1/domains/{name}", dependencies=auth, tags=["admin"], summary="Remove a domain (hot swap)")
    async def remove_domain(name: DomainName, request: Request) -> JSONResponse:
        try:
            return await swap(request, lambda p: changes.remove(p, name))
        except KeyError:
            raise ApiError(404, f"no domain {name!r}", code="unknown_domain") from None
