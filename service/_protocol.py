"""uvicorn's HTTP protocols with a header deadline, header bounds and a connection limit.

uvicorn closes idle keep-alive connections, but a client that sends half a request line or half its
headers is kept forever, one file descriptor each, and headers are unbounded (1.4M header lines, or
one header of 64 MiB, were read and held). These subclasses close a connection when

- its request headers are not complete ``MROPE_HEADER_TIMEOUT_S`` seconds after the connection opened
  (or after the first byte of a later request on it);
- a request line and its headers pass ``MROPE_MAX_HEADER_BYTES`` bytes or ``MROPE_MAX_HEADERS`` lines
  (answered 431 first; a header still arriving is counted as it arrives, so it is never held whole);
- it would be the worker's connection number ``MROPE_MAX_CONNECTIONS + 1``: up to
  :data:`HEALTH_RESERVE` such connections may still ask ``GET /healthz`` (one request each, headers
  within :data:`HEALTH_HEADER_TIMEOUT_S`), so a full worker stays live for its orchestrator; anything
  else on them is answered 503; past the reserve the connection is closed at once.

Bodies have their own deadlines in the app (:mod:`mrope.service._guards`); the protocol tells the app when a
body has arrived in full (:data:`mrope.service._guards.BODY_RECEIVED`), so reading it arms no deadline.
:func:`mrope.service._server.run` selects this class; with plain ``uvicorn`` pass
``--http mrope.service:HttpToolsProtocol`` (it needs ``httptools``, a dependency of the service).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpTools

from mrope._caches import cached

from ._guards import BODY_RECEIVED
from ._settings import Settings

log = logging.getLogger("mrope.service")


HEALTH_RESERVE = 2
"""Connections accepted past ``MROPE_MAX_CONNECTIONS`` for one ``GET /healthz`` each."""
HEALTH_HEADER_TIMEOUT_S = 2.0
"""The header deadline of a reserve connection (or ``MROPE_HEADER_TIMEOUT_S`` when shorter)."""
HEALTH_PATH = b"/healthz"


@dataclass(frozen=True)
class Limits:
    """What the protocol enforces, from the ``MROPE_*`` settings."""

    header_timeout_s: float
    max_connections: int
    max_header_bytes: int
    max_headers: int


@cached("service.limits", maxsize=1)
def _limits() -> Limits:
    s = Settings.from_env()
    return Limits(s.header_timeout_s, s.max_connections, s.max_header_bytes, s.max_headers)


class _Refused(Exception):
    """Raised in a parser callback after the connection was answered and closed: stops the parser."""


def raw_response(
    status: int, code: str, message: str, cap: str | None = None, limit: int | None = None
) -> bytes:
    """A complete ``Connection: close`` error response with the app's JSON error body."""
    error: dict[str, Any] = {"code": code, "message": message}
    if cap is not None:
        error.update(cap=cap, limit=limit)
    body = orjson.dumps({"error": error})
    head = STATUS_LINE[status] + (
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    )
    return head + body


class _Deadlines:
    """The header deadline and connection limit, mixed into a uvicorn protocol class."""

    connections: set[Any]
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _header_timer: asyncio.TimerHandle | None = None
    _reserve = False  # accepted past the connection limit: one GET /healthz only

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        timeout = _limits().header_timeout_s
        if self._reserve:
            timeout = min(timeout, HEALTH_HEADER_TIMEOUT_S)
        self._header_timer = self.loop.call_later(timeout, self._header_timeout)

    def _disarm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _connections_over_limit(self) -> int:
        return len(self.connections) - _limits().max_connections


class HttpToolsProtocol(_Deadlines, _HttpTools):
    """uvicorn's httptools protocol with the deadlines and bounds of this module."""

    _refused = False
    _in_headers = False
    _header_bytes = 0  # request line and complete header lines of the current request
    _header_count = 0
    _stalled_bytes = 0  # bytes of chunks in which no part of the headers completed (one long line)
    _progress = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        over = self._connections_over_limit()
        if over > HEALTH_RESERVE:
            transport.close()
            return
        self._reserve = over > 0
        self._arm_header_deadline()

    def _refuse(
        self, status: int, code: str, message: str, cap: str | None = None, limit: int | None = None
    ) -> None:
        """Answer ``status`` and close the connection; nothing more is read from it."""
        self._refused = True
        self._disarm_header_deadline()
        if not self.transport.is_closing():
            self.transport.write(raw_response(status, code, message, cap, limit))
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's 400 for bytes that are not HTTP (its parser's error), in the service's JSON error
        shape (uvicorn writes it as plain text); the connection is closed."""
        self._refuse(400, "bad_request", f"the request is not valid HTTP ({msg.rstrip('.')})")

    def data_received(self, data: bytes) -> None:
        """uvicorn's ``data_received`` (a bad request is a 400, an upgrade is handed over), except that a
        request this module has refused is neither logged nor answered again, and the bytes of a header
        line still arriving are counted."""
        if self._refused:
            return
        self._unset_keepalive_if_required()
        self._progress = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            if not self._refused:  # a bug in a callback: uvicorn's answer
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if not self._in_headers:
            return
        if self._progress:
            self._stalled_bytes = 0
            return
        self._stalled_bytes += len(data)
        try:
            self._check_header_size(self._header_bytes + self._stalled_bytes)
        except _Refused:
            return

    def _check_header_size(self, size: int) -> None:
        limits = _limits()
        if size > limits.max_header_bytes:
            self._refuse(
                431,
                "headers_too_large",
                f"the request line and headers pass {limits.max_header_bytes} bytes (MROPE_MAX_HEADER_BYTES)",
                "MROPE_MAX_HEADER_BYTES",
                limits.max_header_bytes,
            )
            raise _Refused

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers, self._progress = True, True
        self._header_bytes = self._header_count = self._stalled_bytes = 0
        self._arm_header_deadline()

    def on_url(self, url: bytes) -> None:
        self._progress = True
        self._header_bytes += len(url)
        self._check_header_size(self._header_bytes)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._progress = True
        self._header_bytes += len(name) + len(value) + 4
        self._header_count += 1
        self._check_header_size(self._header_bytes)
        limit = _limits().max_headers
        if self._header_count > limit:
            self._refuse(
                431,
                "too_many_headers",
                f"the request has more than {limit} header lines (MROPE_MAX_HEADERS)",
                "MROPE_MAX_HEADERS",
                limit,
            )
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm_header_deadline()
        if self._reserve:
            path = self.url.split(b"?", 1)[0]
            if path != HEALTH_PATH or self.parser.get_method() not in (b"GET", b"HEAD"):
                limit = _limits().max_connections
                self._refuse(
                    503,
                    "too_many_connections",
                    f"this worker holds its most connections (MROPE_MAX_CONNECTIONS={limit}); only "
                    "GET /healthz is answered past it; retry shortly",
                    "MROPE_MAX_CONNECTIONS",
                    limit,
                )
                raise _Refused
        super().on_headers_complete()
        if self._reserve and self.cycle is not None:
            self.cycle.keep_alive = False  # one probe per reserve connection

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.scope[BODY_RECEIVED] = True  # the app's body reads cannot wait now (mrope.service._guards)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)
