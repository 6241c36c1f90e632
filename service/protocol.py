"""uvicorn's HTTP protocols with a header deadline and a connection limit.

uvicorn closes idle keep-alive connections, but a client that sends half a request line or half its
headers is kept forever, one file descriptor each. These subclasses close a connection when

- its request headers are not complete ``MROPE_HEADER_TIMEOUT_S`` seconds after the connection opened
  (or after the first byte of a later request on it), or
- it would be the worker's connection number ``MROPE_MAX_CONNECTIONS + 1``.

Bodies have their own deadlines in the app (:mod:`mrope.service.guards`); the protocol tells the app when a
body has arrived in full (:data:`mrope.service.guards.BODY_RECEIVED`), so reading it arms no deadline.
:func:`mrope.service.server.run` selects this class; with plain ``uvicorn`` pass
``--http mrope.service.protocol:HttpToolsProtocol`` (it needs ``httptools``, a dependency of the service).
"""

from __future__ import annotations

import asyncio
import logging
from functools import lru_cache
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpTools

from .guards import BODY_RECEIVED
from .settings import Settings

log = logging.getLogger("mrope.service")


@lru_cache(maxsize=1)
def _limits() -> tuple[float, int]:
    settings = Settings.from_env()
    return settings.header_timeout_s, settings.max_connections


class _Deadlines:
    """The header deadline and connection limit, mixed into a uvicorn protocol class."""

    connections: set[Any]
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _header_timer: asyncio.TimerHandle | None = None

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        timeout, _ = _limits()
        self._header_timer = self.loop.call_later(timeout, self._header_timeout)

    def _disarm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _over_connection_limit(self) -> bool:
        _, limit = _limits()
        return len(self.connections) > limit


class HttpToolsProtocol(_Deadlines, _HttpTools):
    """uvicorn's httptools protocol with the deadlines of this module."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._over_connection_limit():
            transport.close()
            return
        self._arm_header_deadline()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_header_deadline()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.scope[BODY_RECEIVED] = True  # the app's body reads cannot wait now (mrope.service.guards)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)
