"""Request guards, applied before any route reads the body: content type (415), ``Accept`` (406) and
body size (413).

:class:`RequestGuard` refuses a wrong ``Content-Type`` or an unacceptable ``Accept`` without reading a
byte, refuses a declared ``Content-Length`` over the cap, and counts the bytes of bodies that declare
none (chunked), raising a 413 the moment the cap is passed, so an oversized body is never held in
memory. The negotiated output format is left in the ASGI scope for the route (:func:`output_format`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ServiceError, error_response, over_cap
from service.render import OutputFormat, negotiate

FORMAT_KEY = "mrope.output_format"
"""ASGI scope key of the output format negotiated by the guard."""


@dataclass(frozen=True)
class Route:
    """What the guard checks for one path.

    Attributes:
        limit, cap: most body bytes, and the environment variable that sets it.
        content_types: media types a POST body may have (empty: not checked); ``+json`` counts as JSON.
        describe: the accepted body in words, for the 415 message.
        negotiates: the route answers JSON or npy by ``Accept``.
    """

    limit: int
    cap: str
    content_types: tuple[str, ...] = ()
    describe: str = ""
    negotiates: bool = False


class RequestGuard:
    """Pure ASGI middleware: ``routes`` maps a path to its :class:`Route`; other paths get ``default``."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, Route], default: Route) -> None:
        self.app = app
        self.routes = dict(routes)
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.routes.get(scope.get("path", ""), self.default)
        headers = {
            k: v for k, v in scope.get("headers", ()) if k in (b"content-length", b"content-type", b"accept")
        }
        try:
            if scope.get("method") == "POST":
                check_content_type(headers.get(b"content-type", b"").decode("latin-1"), route)
                if route.negotiates:
                    scope[FORMAT_KEY] = negotiate(
                        headers[b"accept"].decode("latin-1") if b"accept" in headers else None
                    )
            declared = headers.get(b"content-length")
            if declared is not None:
                check_declared_length(declared, route)
        except ServiceError as exc:
            response = error_response(
                exc.status_code, exc.code, exc.message, exc.headers, cap=exc.cap, limit=exc.limit
            )
            await response(scope, receive, send)
            return
        await self.app(scope, counting_receive(receive, route.limit, route.cap), send)


def check_content_type(value: str, route: Route) -> None:
    """415 unless the media type of ``value`` is one the route takes."""
    if not route.content_types:
        return
    media = value.split(";", 1)[0].strip().lower()
    if media in route.content_types or (
        "application/json" in route.content_types and media.endswith("+json")
    ):
        return
    got = f"Content-Type {media!r}" if media else "no Content-Type"
    raise ServiceError(415, "unsupported_media_type", f"this endpoint takes {route.describe}; got {got}")


def check_declared_length(declared: bytes, route: Route) -> None:
    """400 for a malformed ``Content-Length``, 413 for one over the route's cap."""
    try:
        size = int(declared)
    except ValueError:
        size = -1
    if size < 0:
        raise ServiceError(400, "bad_request", "Content-Length is not a non-negative integer")
    if size > route.limit:
        raise too_big(size, route.limit, route.cap)


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


async def output_format(request: Request) -> OutputFormat:
    """FastAPI dependency: the output format the guard negotiated (``async``: no worker-thread hop)."""
    fmt = request.scope.get(FORMAT_KEY)
    return fmt if fmt is not None else negotiate(request.headers.get("accept"))
