"""Request/response bodies and their validation, mapped to 4xx `ApiError`s.

Status codes: 415 not JSON (Content-Type), 400 malformed JSON, 422 well-formed JSON that breaks the schema
or a limit (too many texts, a text too long, an empty text). 413 is only for the raw body size
(`middleware.BodyLimitMiddleware`), which is checked before any of this.
"""

from __future__ import annotations

from email.message import Message
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError
from starlette.requests import Request

from redkit.serve.errors import ApiError

MAX_ERROR_DETAILS = 10  # a body with 10,000 bad items gets 10 details, not 10,000

M = TypeVar("M", bound=BaseModel)
DomainName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    texts: list[str]


class Prediction(BaseModel):
    label: str | int
    probability: float | None
    weights: dict[str, float]
    out_of_scope: bool | None


class ModelRef(BaseModel):
    version: int  # 1 at start, +1 with each domain added or removed
    fingerprint: str  # the backbone's the model answers with


class PredictResponse(BaseModel):
    predictions: list[Prediction]
    model: ModelRef  # the predictor that answered this request (all of it: a request is never split)


class DomainRequest(BaseModel):
    """Add a domain from an expert directory written by `redkit train-expert`, named by its folder
    under the server's --experts-dir (a name, never a path: the server looks nowhere else)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    expert: DomainName


def media_type(content_type: str | None) -> str:
    """'type/subtype' of a Content-Type header, lower case, parameters dropped ('' if there is none)."""
    if not content_type:
        return ""
    message = Message()
    message["content-type"] = content_type
    return message.get_content_type()


def is_json_media_type(content_type: str | None) -> bool:
    maintype, _, subtype = media_type(content_type).partition("/")
    return maintype == "application" and (subtype == "json" or subtype.endswith("+json"))


async def read_json(request: Request, model: type[M]) -> M:
    """The request body as `model`: 415 before reading anything if it is not JSON, then 400 / 422."""
    if not is_json_media_type(request.headers.get("content-type")):
        raise ApiError(415, "Content-Type must be application/json")
    body = await request.body()  # bounded by BodyLimitMiddleware
    try:
        return model.model_validate_json(body)  # one pass: JSON parsing and validation in pydantic-core
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise ApiError(400, f"malformed JSON: {errors[0]['msg']}", code="malformed_json") from None
        details = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors[:MAX_ERROR_DETAILS]]
        raise ApiError(
            422, f"request body does not match the schema ({len(errors)} error(s))", details=details
        ) from None


def check_texts(texts: list[str], *, max_batch: int, max_chars: int) -> None:
    if not texts:
        raise ApiError(422, "'texts' must hold at least one text")
    if len(texts) > max_batch:
        raise ApiError(422, f"'texts' holds {len(texts)} texts; at most {max_batch} per request", code="too_many_texts")
    for i, text in enumerate(texts):
        if not text.strip():
            raise ApiError(422, f"texts[{i}] is empty or whitespace", code="empty_text")
        if len(text) > max_chars:
            raise ApiError(422, f"texts[{i}] has {len(text)} characters; at most {max_chars}", code="text_too_long")
