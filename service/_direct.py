"""Direct routes: the hot JSON endpoints answered without the framework's router and route machinery.

``POST /v1/positions`` and ``POST /v1/rope-index`` are declared as FastAPI routes (so ``/openapi.json``,
``/docs`` and a 405 for other methods stay as they are), but their requests are answered here, inside
every middleware of the service (access log and request id, metrics, API keys, concurrency limit, body
guard): :class:`DirectRoutes` calls the same endpoint function with a plain ``Request`` and turns an
exception into a response with the same handlers the app installed (:mod:`mrope.service._errors`), so a client
sees the same bytes either way. What is skipped is per-request work the endpoints do not use: matching
the path against every route, the dependency solver, the exception and exit-stack middlewares around
the router, and the body stream generator. Any other method or path goes on to the app unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


async def read_body(receive: Receive) -> bytes:
    """The whole request body from ASGI ``receive`` (what ``Request.body()`` returns, without its
    generator); a disconnect before the end raises ``ClientDisconnect``, as Starlette does."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class DirectRoutes:
    """Pure ASGI middleware: ``POST`` to a path of ``endpoints`` is answered by its endpoint function.

    ``handlers`` maps exception classes to the app's handlers (looked up along the exception's MRO, as
    Starlette does); an exception without one (a bug) propagates to
    :class:`~mrope.service._operator.AccessLog`, which answers 500 ``internal_error`` as for any other route.
    """

    def __init__(
        self,
        app: ASGIApp,
        endpoints: Mapping[str, Endpoint],
        handlers: Mapping[Any, ErrorHandler],
    ) -> None:
        self.app = app
        self.endpoints = dict(endpoints)
        self.handlers = {k: v for k, v in handlers.items() if isinstance(k, type) and k is not Exception}

    def handler_for(self, exc: Exception) -> ErrorHandler | None:
        for cls in type(exc).__mro__:
            handler = self.handlers.get(cls)
            if handler is not None:
                return handler
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = (
            self.endpoints.get(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = self.handler_for(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
            exc.__traceback__ = None  # a reused exception instance must not collect tracebacks
        await response(scope, receive, send)
