"""Admin routes: add and remove domains while serving, by swapping the predictor. What a change does is
given to the routes (redkit/serve/lifecycle.py DomainChanges, from redkit/serve/main.py), not imported.

Mounted only when an admin token is configured; without one they do not exist (404, like any unknown
route), so a deployment without a token has no admin surface to probe. With one, a missing or unknown
`Authorization: Bearer <token>` is 401. Tokens are compared in constant time (hmac.compare_digest on
bytes: on str it raises TypeError for non-ASCII input, which would be a 500).

Who may change what (redkit/serve/tokens.py): the admin token everything; an owner's token (--owner-tokens)
uploads only with ?owner=<its own name> and removes only the domains that owner contributed (the served run's
federation record), else 403. An upload is unpacked in a worker thread (redkit/federated/upload.py `unpack`:
a large body is parsed while the server keeps answering).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse

from redkit.errors import RedkitError
from redkit.federated.upload import CONTENT_TYPE as UPLOAD_TYPE
from redkit.federated.upload import SIZE_LIMIT, unpack
from redkit.jsonfile import read_json as read_json_file
from redkit.serve.errors import ApiError
from redkit.serve.schema import DomainName, DomainRequest, media_type, read_json
from redkit.serve.state import ModelState
from redkit.serve.tokens import owner_of

log = logging.getLogger("redkit.serve")


@dataclass(frozen=True)
class Caller:
    """Who sent a request to an admin route, and what that one may do (403, one line, otherwise)."""

    owner: str | None  # the owner whose token was given; None: the admin token, which may do everything

    def may_upload_as(self, owner: str) -> None:
        if self.owner is not None and self.owner != owner:
            raise ApiError(403, f"owner {self.owner!r}'s token uploads only as that owner (?owner={self.owner})")

    def may_add_experts(self) -> None:
        if self.owner is not None:
            raise ApiError(403, f"owner {self.owner!r}'s token only uploads; adding an expert needs the admin token")

    def may_remove(self, domain: str, current) -> None:
        if self.owner is not None and domain not in contributed_by(self.owner, current):
            raise ApiError(403, f"owner {self.owner!r}'s token removes only that owner's domains, not {domain!r}")


def bearer_auth(token: str, owners: dict[str, bytes] | None = None) -> Any:
    """The dependency that says who is calling: the admin, an owner (`owners`: redkit/serve/tokens.py), or 401."""
    expected = token.encode()

    async def check(request: Request) -> Caller:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given = given.strip()
            if hmac.compare_digest(given.encode(), expected):
                return Caller(None)
            owner = owner_of(given, owners or {})
            if owner is not None:
                return Caller(owner)
        raise ApiError(401, "missing or invalid token", headers={"WWW-Authenticate": "Bearer"})

    return check


def contributed_by(owner: str, current) -> list[str]:
    """The domains `owner` contributed to the served run (its federation record: owners -> domains); none where
    the run was not assembled from owners' contributions, or a bundle is served alone."""
    if current.source_run is None:
        return []
    from redkit.fitting.run import FEDERATION  # imports torch, as the removal that follows does anyway

    record = Path(current.source_run) / FEDERATION
    if not record.is_file():
        return []
    return list(read_json_file(record, "the run's federation record").get("owners", {}).get(owner, []))


def install_admin_routes(
    app: FastAPI, token: str, changes, owner_tokens: dict[str, bytes] | None = None, upload_limit: int = SIZE_LIMIT
) -> None:
    """Registered on the app itself, not via include_router: in FastAPI 0.165 an included route's
    scope["route"].path lacks the router prefix, which would mislabel the metrics."""
    auth = Depends(bearer_auth(token, owner_tokens))  # a default, not Annotated: this module's annotations are strings

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
        tags=["admin"],
        summary="Add a domain: an expert by name (JSON), or an owner's contribution uploaded as a tar (hot swap)",
    )
    async def add_domain(
        request: Request, owner: Annotated[DomainName | None, Query()] = None, caller: Caller = auth
    ) -> JSONResponse:
        if media_type(request.headers.get("content-type")) == UPLOAD_TYPE:
            if owner is None:
                raise ApiError(422, "an uploaded contribution needs ?owner=NAME", code="refused")
            caller.may_upload_as(owner)
            body = await request.body()  # bounded by BodyLimitMiddleware (the server's --max-upload-bytes)
            try:  # off the event loop: parsing a large tar would hold up every other request
                files = await asyncio.to_thread(unpack, body, f"owner {owner!r}'s upload", upload_limit)
            except RedkitError as err:
                raise ApiError(422, str(err), code="refused") from None
            return await swap(request, lambda p: changes.contribute(p, owner, files))
        caller.may_add_experts()
        body = await read_json(request, DomainRequest)
        return await swap(request, lambda p: changes.add(p, body.expert))

    @app.delete("/v1/domains/{name}", tags=["admin"], summary="Remove a domain (hot swap)")
    async def remove_domain(name: DomainName, request: Request, caller: Caller = auth) -> JSONResponse:
        def change(current):  # checked on the model it changes, under the swap's lock: no race with an upload
            caller.may_remove(name, current)
            return changes.remove(current, name)

        try:
            return await swap(request, change)
        except KeyError:
            raise ApiError(404, f"no domain {name!r}", code="unknown_domain") from None
