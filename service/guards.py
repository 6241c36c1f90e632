"""Request guards: body size caps (counted while the body streams in) and content-type checks.

:class:`BodyLimitMiddleware` refuses a declared ``Content-Length`` over the cap before reading a byte,
and counts the bytes of bodies that declare none (chunked), raising a 413 the moment the cap is passed,
so an oversized body is never held in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ServiceError, error_response, over_cap


class BodyLimitMiddleware:
    """Caps request bodies by path: ``limits`` maps a path to ``(bytes, env var)``; other paths get
    ``default``."""

    def __init__(self, app: ASGIApp, limits: Mapping[str, tuple[int, str]], default: tuple[int, str]) -> None:
        self.app = app
        self.limits = dict(limits)
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, cap = self.limits.get(scope.get("path", ""), self.default)
        declared = None
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                declared = value
                break
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size < 0:
                await error_response(400, "bad_request", "Content-Length is not a non-negative integer")(
                    scope, receive, send
                )
                return
            if size > limit:
                exc = too_big(size, limit, cap)
                await error_response(413, exc.code, exc.message, cap=cap, limit=limit)(scope, receive, send)
                return
        await self.app(scope, counting_receive(receive, limit, cap), send)


def too_big(size: int, limit: int, cap: str) -> ServiceError:
    return over_cap("payload_too_large", "the request body size in bytes", size, cap, limit)


def counting_receive(receive: Receive, limit: int, cap: str) -> Receive:
    """A ``receive`` that raises a 413 once more than ``limit`` body bytes have arrived."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise too_big(seen, limit, cap)
        return message

    return wrapped


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def require_content_type(*allowed: str, describe: str) -> Callable[[Request], None]:
    """A FastAPI dependency that answers 415 unless the request's media type is one of ``allowed``
    (a ``+json`` suffix counts as JSON)."""

    def check(request: Request) -> None:
        media = _content_type(request)
        if media in allowed or ("application/json" in allowed and media.endswith("+json")):
            return
        got = f"Content-Type {media!r}" if media else "no Content-Type"
        raise ServiceError(415, "unsupported_media_type", f"this endpoint takes {describe}; got {got}")

    return check


require_json = require_content_type(
    "application/json", describe="a JSON body (Content-Type: application/json)"
)
require_multipart = require_content_type(
    "multipart/form-data", describe="a multipart form (Content-Type: multipart/form-data)"
)
