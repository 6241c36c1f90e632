"""What an operator needs around the routes: an access log with request ids, API keys and a
concurrency limit (pure ASGI middlewares).

- :class:`AccessLog` (outermost): gives every request an id (the client's ``X-Request-ID`` when it is
  short and plain, else a new one), returns it in the ``X-Request-ID`` header and in every error body,
  writes one line per request to logger ``mrope.access`` (never a header, so never a key; the path with
  its control characters escaped, so one request is one line) and records
  the request metrics. It answers an unhandled exception (a bug) with a 500 ``internal_error``, which
  ends there, so its connection stays open. A
  request cancelled at shutdown (the grace period over) is answered 503 ``shutting_down`` when nothing
  was sent yet, and logged and counted as that, without a traceback (it is no server error).
- :class:`ApiKeys`: with ``MROPE_API_KEYS`` set, every path but ``/healthz`` needs
  ``Authorization: Bearer <key>`` (401 otherwise); keys are compared in constant time.
- :class:`ConcurrencyLimit`: at most ``MROPE_MAX_CONCURRENT`` requests in progress (probes and metrics
  not counted); past it 503 ``overloaded`` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
import uuid
from collections.abc import Collection

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._errors import CURRENT_REQUEST, RequestInfo, error_response, internal_error
from ._guards import closing_headers
from ._logtext import log_text
from ._metrics import Metrics

access_log = logging.getLogger("mrope.access")

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_OTHER = "other"


def request_id(scope: Scope) -> str:
    """The client's ``X-Request-ID`` when it is 1-64 plain characters, else a new random id."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if _CLIENT_ID.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class AccessLog:
    """Request ids, access lines and request metrics (see the module doc).

    ``endpoints``: the paths metrics are labelled with; any other path is ``other``, so random URLs
    cannot grow the metrics.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, endpoints: Collection[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.endpoints = frozenset(endpoints)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        info = RequestInfo(request_id(scope))
        token = CURRENT_REQUEST.set(info)
        start = time.perf_counter()
        status = 500
        sent = 0
        complete = False
        started = False
        header = (REQUEST_ID_HEADER.lower().encode(), info.request_id.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status, sent, complete, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                message["headers"] = [*message.get("headers", ()), header, *closing_headers(scope)]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            # a bug: logged, and answered 500 when nothing was sent yet. It ends here, so the server
            # keeps the connection (and a pipelined request on it). A response cut off mid-body cannot
            # be answered again: re-raised, the server closes the connection.
            response = await internal_error(Request(scope), exc)
            if not started:
                await response(scope, receive, send_with_id)
            elif not complete:
                raise
        except asyncio.CancelledError:
            # uvicorn cancels what still runs when MROPE_SHUTDOWN_GRACE_S is over: not a server error.
            # Answered when nothing was sent yet; else the server closes the connection.
            if not started:
                response = error_response(
                    503,
                    "shutting_down",
                    "the server shut down before this request finished; retry it",
                    headers={"Retry-After": "1", "Connection": "close"},
                )
                await response(scope, receive, send_with_id)
            else:
                info.error_code = "shutting_down"
        finally:
            CURRENT_REQUEST.reset(token)
            seconds = time.perf_counter() - start
            path = scope.get("path", "")
            endpoint = path if path in self.endpoints else _OTHER
            code = str(status)
            self.metrics.requests.labels(endpoint, scope.get("method", ""), code).inc()
            self.metrics.latency.labels(endpoint, code).observe(seconds)
            if info.error_code is not None:
                self.metrics.rejections.labels(info.error_code).inc()
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client")
                access_log.info(
                    '%s "%s %s" %d %dB %.1fms id=%s%s',
                    f"{client[0]}:{client[1]}" if client else "-",
                    log_text(scope.get("method", ""), 20),
                    log_text(path),
                    status,
                    sent,
                    seconds * 1e3,
                    info.request_id,
                    f" error={info.error_code}" if info.error_code else "",
                )


class ApiKeys:
    """401 unless the request carries one of ``keys`` as a bearer token (``open_paths`` excepted)."""

    def __init__(self, app: ASGIApp, keys: Collection[str], open_paths: Collection[str]) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)
        self.open_paths = frozenset(open_paths)

    def allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() != b"bearer":
                    return False
                token = token.strip()
                # compare with every key (no early exit), in constant time each
                return sum(hmac.compare_digest(token, key) for key in self.keys) > 0
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        response = error_response(
            401,
            "unauthorized",
            "this service needs an API key: send 'Authorization: Bearer <key>' (keys are set by MROPE_API_KEYS)",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)


class ConcurrencyLimit:
    """503 ``overloaded`` (with ``Retry-After``) while ``limit`` requests are in progress."""

    def __init__(self, app: ASGIApp, limit: int, metrics: Metrics, exempt: Collection[str]) -> None:
        self.app = app
        self.limit = limit
        self.metrics = metrics
        self.exempt = frozenset(exempt)
        self.running = 0
        metrics.in_flight.set_function(lambda: self.running)  # read at scrape time, not per request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        if self.running >= self.limit:
            response = error_response(
                503,
                "overloaded",
                f"{self.running} requests are in progress, the most this worker takes at once "
                f"(MROPE_MAX_CONCURRENT={self.limit}); retry shortly",
                headers={"Retry-After": "1"},
                cap="MROPE_MAX_CONCURRENT",
                limit=self.limit,
            )
            await response(scope, receive, send)
            return
        self.running += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.running -= 1
