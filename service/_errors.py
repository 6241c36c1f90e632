"""One error shape for every failure: ``{"error": {"code": ..., "message": ...}}``.

Client mistakes are 4xx with a code and a message that says what was expected; an exceeded limit also
names its cap (``"cap": "MROPE_MAX_TOKENS", "limit": 1048576``). Anything else is a 500 with code
``internal_error`` (a bug: client input must never reach it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from mrope._errors import LayoutError, MediaError, MRopeError, SpecError, TokenError
from mrope.schema import _errors as request_errors

from ._logtext import log_text

log = logging.getLogger("mrope.service")

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    503: "unavailable",
}

_MROPE_CODES: tuple[tuple[type[MRopeError], str], ...] = (
    (MediaError, "invalid_media"),
    (TokenError, "token_error"),
    (LayoutError, "layout_error"),
    (SpecError, "spec_error"),
    (MRopeError, "invalid_input"),
)


class ServiceError(StarletteHTTPException):
    """A request the service refuses, with its HTTP status, a stable code and a clear message.

    It is an ``HTTPException`` so that raising it while the framework reads the body (the body-size
    guard does) still reaches the handler installed by :func:`install_handlers`.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        cap: str | None = None,
        limit: int | float | None = None,
        headers: Mapping[str, str] | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(status_code=status, detail=message, headers=dict(headers) if headers else None)
        self.code = code
        self.message = message
        self.cap = cap
        self.limit = limit
        self.details = details


def over_cap(code: str, what: str, value: int | float, cap: str, limit: int | float) -> ServiceError:
    """A 413 for a request over one configured limit; the message names the variable that sets it."""
    return ServiceError(
        413,
        code,
        f"{what} is {value:,}, over the limit of {limit:,} set by {cap}",
        cap=cap,
        limit=limit,
    )


@dataclass
class RequestInfo:
    """What the access log learns about the request being answered: its id, and the error code of
    an error response."""

    request_id: str
    error_code: str | None = None


CURRENT_REQUEST: ContextVar[RequestInfo | None] = ContextVar("mrope_request", default=None)
"""The request being answered (set by :class:`mrope.service._operator.AccessLog`)."""


def error_body(code: str, message: str, **extra: Any) -> bytes:
    """The JSON body of an error response; it carries the request id when there is one."""
    err: dict[str, Any] = {"code": code, "message": message}
    err.update({k: v for k, v in extra.items() if v is not None})
    info = CURRENT_REQUEST.get()
    if info is not None:
        err["request_id"] = info.request_id
        info.error_code = code
    return orjson.dumps({"error": err})


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> Response:
    return Response(
        error_body(code, message, **extra), status_code=status, media_type="application/json", headers=headers
    )


MAX_DETAILS = 20
"""Most validation error details in one response; the message gives the total."""


def describe_validation_errors(
    errors: Iterable[Mapping[str, Any]], total: int | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """A one-line message and a JSON-safe list (``loc``, ``msg``, ``type``) for pydantic errors: the
    wording of :func:`mrope.schema._errors.describe_validation_errors`, shared with every face. The offending
    input is not echoed back: it can be megabytes.

    At most :data:`MAX_DETAILS` details are listed; ``total`` is the full error count when ``errors``
    holds only the first ones (the message says how many more there were).
    """
    first = []
    for e in errors:
        if len(first) == MAX_DETAILS:
            break
        first.append(e)
    count = max(total or 0, len(first))
    message, details = request_errors.describe_validation_errors(first[:5])
    if count > len(details):
        message += f" (and {count - len(details)} more)"
    if len(first) > 5:
        details += request_errors.describe_validation_errors(first[5:])[1]
    for d in details:
        d["msg"] = d["msg"][:300]
    return message, details


def mrope_error_code(exc: MRopeError) -> str:
    """The error code of a library error (the last entry, MRopeError, matches every one)."""
    return next(code for cls, code in _MROPE_CODES if isinstance(exc, cls))


async def _service_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_response(
        exc.status_code, exc.code, exc.message, exc.headers, cap=exc.cap, limit=exc.limit, details=exc.details
    )


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        ctx = errors[0].get("ctx") or {}
        detail = ctx.get("error", "") if isinstance(ctx, dict) else ""
        return error_response(400, "invalid_json", f"request body is not valid JSON: {detail}".rstrip(": "))
    message, details = describe_validation_errors(errors[:MAX_DETAILS], total=len(errors))
    return error_response(422, "validation_error", message, details=details)


async def _mrope_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, MRopeError)
    return error_response(422, mrope_error_code(exc), str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code == 404:
        message = f"no endpoint at {request.url.path}; see /docs for the API"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    return error_response(exc.status_code, code, message, exc.headers)


async def _memory_error(request: Request, exc: Exception) -> Response:
    # a request that needs more memory than the process can get: the service is short of it, the
    # request may fit later (or smaller)
    log.warning("out of memory on %s %s", log_text(request.method, 20), _log_path(request))
    return error_response(
        503,
        "out_of_memory",
        "the server could not get the memory this request needs; retry later, or send a smaller request",
        {"Retry-After": "1"},
    )


def _log_path(request: Request) -> str:
    """The request's raw path for a log line, escaped (``request.url`` would drop its CR, LF and tabs,
    gluing what followed them to the path)."""
    return log_text(request.scope.get("path", ""))


async def _client_disconnect(request: Request, exc: Exception) -> Response:
    # nobody will read this answer; it only keeps a vanished client out of the error log
    log.info("client disconnected during %s %s", log_text(request.method, 20), _log_path(request))
    return error_response(
        400, "client_disconnected", "the client disconnected before the request body was read"
    )


async def internal_error(request: Request, exc: Exception) -> Response:
    """Log an unhandled exception (a bug) with its request and answer 500 ``internal_error``."""
    log.exception("unhandled error on %s %s", log_text(request.method, 20), _log_path(request), exc_info=exc)
    return error_response(500, "internal_error", f"internal error ({type(exc).__name__}); this is a bug")


def install_handlers(app: FastAPI) -> None:
    """Route every error type to the one JSON error shape (an unhandled exception is answered by
    :class:`mrope.service._operator.AccessLog` with :func:`internal_error`)."""
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(MRopeError, _mrope_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_disconnect)
    app.add_exception_handler(MemoryError, _memory_error)
