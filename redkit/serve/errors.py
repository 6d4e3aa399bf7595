"""One JSON error shape for every non-2xx answer: {"error": {"code", "message", "details"?}}.

Inputs are never echoed back (privacy, response size, and lone surrogates that cannot be encoded).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.details = details
        self.headers = headers


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"code": code or _CODES.get(status, "error"), "message": message}
    if details:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.message, code=exc.code, details=exc.details, headers=exc.headers)

    async def on_http_error(_: Request, exc: Exception) -> JSONResponse:  # 404 unknown route, 405, ...
        assert isinstance(exc, StarletteHTTPException)
        return error_response(exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:  # path/query params
        assert isinstance(exc, RequestValidationError)
        details = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()
        ]
        return error_response(422, "invalid request", details=details)

    async def on_disconnect(_: Request, exc: Exception) -> Response:  # client left mid-body: nobody to answer
        return Response(status_code=499)  # nginx's "client closed request", so metrics tell it apart from 4xx/5xx

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:  # logged by Starlette, then this body
        return error_response(500, "internal error")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(ClientDisconnect, on_disconnect)
    app.add_exception_handler(Exception, on_unexpected)
