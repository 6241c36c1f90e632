"""Request guards, applied before any route reads the body: content type (415), ``Accept`` (406) and
body size (413).

:class:`RequestGuard` refuses a wrong ``Content-Type`` or an unacceptable ``Accept`` without reading a
byte, refuses a declared ``Content-Length`` over the cap, and counts the bytes of bodies that declare
none (chunked), raising a 413 the moment the cap is passed, so an oversized body is never held in
memory. The negotiated output format is left in the ASGI scope for the route (:func:`output_format`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import anyio

if sys.version_info >= (3, 11):  # asyncio's own timeout: a fraction of anyio's cancel-scope cost per call
    from asyncio import timeout as _timeout
else:  # pragma: no cover - Python 3.10
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def _timeout(seconds: float) -> AsyncIterator[None]:
        with anyio.fail_after(seconds):
            yield


from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._errors import ServiceError, error_response, over_cap
from ._render import OutputFormat, negotiate

FORMAT_KEY = "mrope.output_format"
"""ASGI scope key of the output format negotiated by the guard."""

BODY_STATE = "mrope.body_state"
"""ASGI scope key of the request's :class:`BodyState`, set by :class:`RequestGuard` (see :func:`closing_headers`)."""

BODY_RECEIVED = "mrope.body_received"
"""ASGI scope key that :class:`mrope.service._protocol.HttpToolsProtocol` sets once the whole request body has
arrived: reading it then cannot wait, so no read deadline is armed (a timer per read costs more than a
small request's routing). Without that protocol the key is never set and every read is timed."""


@dataclass(frozen=True)
class Route:
    """What the guard checks for one path.

    Attributes:
        limit, cap: most body bytes, and the environment variable that sets it.
        body_timeout_s, body_timeout_cap: longest time to receive the whole body, and its variable.
        content_types: media types a POST body may have (empty: not checked); exactly these (a
            ``+json`` type such as ``application/evil+json`` is not JSON to this service).
        describe: the accepted body in words, for the 415 message.
        negotiates: the route answers JSON or npy by ``Accept``.
    """

    limit: int
    cap: str
    content_types: tuple[str, ...] = ()
    describe: str = ""
    negotiates: bool = False
    body_timeout_s: float = 30.0
    body_timeout_cap: str = "MROPE_BODY_TIMEOUT_S"


@dataclass(frozen=True)
class BodyPace:
    """How slowly a body may arrive (see :func:`counting_receive`).

    Attributes:
        read_timeout_s: longest wait for the next piece of the body (``MROPE_READ_TIMEOUT_S``).
        min_rate: slowest average bytes per second once the body has taken ``read_timeout_s``
            (``MROPE_MIN_UPLOAD_RATE``).
    """

    read_timeout_s: float = 10.0
    min_rate: float = 32768.0


class RequestGuard:
    """Pure ASGI middleware: ``routes`` maps a path to its :class:`Route`; other paths get ``default``."""

    def __init__(
        self, app: ASGIApp, routes: Mapping[str, Route], default: Route, pace: BodyPace | None = None
    ) -> None:
        self.app = app
        self.routes = dict(routes)
        self.default = default
        self.pace = pace if pace is not None else BodyPace()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.routes.get(scope.get("path", ""), self.default)
        headers = {
            k: v
            for k, v in scope.get("headers", ())
            if k in (b"content-length", b"content-type", b"accept", b"transfer-encoding")
        }
        body = BodyState(complete=not has_body(headers))
        scope[BODY_STATE] = body  # read by closing_headers, in the outermost middleware: an early
        # answer (415, 406, 413 by Content-Length) leaves the body unread and closes the connection
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
        await self.app(scope, counting_receive(receive, route, self.pace, body, scope), send)


CLOSE = ((b"connection", b"close"),)


def closing_headers(scope: Scope) -> tuple[tuple[bytes, bytes], ...]:
    """``Connection: close`` when the request's body was not read to its end, else nothing.

    An answer given before (a cap, a deadline, an early error, a 500) closes the connection: the rest
    of the body is never read. The outermost middleware (:class:`mrope.service._operator.AccessLog`)
    adds these headers, so the 500s of Starlette's error middleware, outside the guard, get them too.
    """
    body = scope.get(BODY_STATE)
    return CLOSE if body is not None and not body.complete else ()


def has_body(headers: Mapping[bytes, bytes]) -> bool:
    """Whether a request announces a body (a non-zero Content-Length, or chunked)."""
    if b"transfer-encoding" in headers:
        return True
    return headers.get(b"content-length", b"0").strip() not in (b"0", b"")


def check_content_type(value: str, route: Route) -> None:
    """415 unless the media type of ``value`` is one the route takes."""
    if not route.content_types:
        return
    media = value.split(";", 1)[0].strip().lower()
    if media in route.content_types:
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


def too_slow(what: str, cap: str, limit: float) -> ServiceError:
    return ServiceError(
        408, "request_timeout", f"the request body {what}; the connection is closed", cap=cap, limit=limit
    )


@dataclass
class BodyState:
    """Whether a request's body has been read to its end."""

    complete: bool = False


def counting_receive(
    receive: Receive,
    route: Route,
    pace: BodyPace,
    state: BodyState | None = None,
    scope: Scope | None = None,
) -> Receive:
    """A ``receive`` that bounds the body: a 413 once more than ``route.limit`` bytes have arrived, a
    408 when the next piece takes longer than ``pace.read_timeout_s``, when the whole body takes longer
    than ``route.body_timeout_s``, or when, after ``pace.read_timeout_s``, it arrives slower than
    ``pace.min_rate`` bytes per second on average. Once the body is complete, calls pass through
    untimed (a response may wait for the client to disconnect); so do reads of a body the server has
    already received in full (``scope[BODY_RECEIVED]``)."""
    seen = 0
    start: float | None = None
    body = state if state is not None else BodyState()
    received = scope if scope is not None else {}

    async def wrapped() -> Message:
        nonlocal seen, start
        if body.complete:
            return await receive()
        now = time.monotonic()
        if start is None:
            start = now
        left = route.body_timeout_s - (now - start)
        wait = min(pace.read_timeout_s, left)
        try:
            if received.get(BODY_RECEIVED):
                message = await receive()
            else:
                async with _timeout(max(wait, 0.0)):
                    message = await receive()
        except TimeoutError:
            if wait < pace.read_timeout_s:
                raise too_slow(
                    f"took longer than {route.body_timeout_s:g} s",
                    route.body_timeout_cap,
                    route.body_timeout_s,
                ) from None
            raise too_slow(
                f"stalled: no data for {pace.read_timeout_s:g} s", "MROPE_READ_TIMEOUT_S", pace.read_timeout_s
            ) from None
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > route.limit:
                raise too_big(seen, route.limit, route.cap)
            if not message.get("more_body", False):
                body.complete = True
            else:
                elapsed = time.monotonic() - start
                if elapsed > pace.read_timeout_s and seen < pace.min_rate * elapsed:
                    raise too_slow(
                        f"arrives at {seen / elapsed:,.0f} bytes/s, slower than the {pace.min_rate:,.0f} "
                        "bytes/s required",
                        "MROPE_MIN_UPLOAD_RATE",
                        pace.min_rate,
                    )
        else:
            body.complete = True
        return message

    return wrapped


def request_format(request: Request) -> OutputFormat:
    """The output format the guard negotiated for ``request``."""
    fmt = request.scope.get(FORMAT_KEY)
    return fmt if fmt is not None else negotiate(request.headers.get("accept"))


async def output_format(request: Request) -> OutputFormat:
    """FastAPI dependency: the output format the guard negotiated (``async``: no worker-thread hop)."""
    fmt = request.scope.get(FORMAT_KEY)
    return fmt if fmt is not None else negotiate(request.headers.get("accept"))
