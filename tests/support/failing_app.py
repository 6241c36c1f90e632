"""An app with routes that fail like a bug would, for tests that need a real 500 from a real server.

``failing_app.create`` is a factory for :func:`mrope.service._server.run` (``app=..., factory=True``):
the service app plus ``GET`` and ``POST /fail/{anything}`` (raises, reading no body) and
``POST /read/{anything}`` (reads its whole body, so a client that leaves mid-body is a disconnect).
``{anything}`` may hold any character, line breaks included (the raw path of a log-injection attempt).
"""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from starlette.responses import Response

from mrope.service.app import create_app

FACTORY = "support.failing_app:create"


def create() -> FastAPI:
    app = create_app()

    @app.api_route("/fail/{rest:path}", methods=["GET", "POST"])
    async def fail(rest: str) -> Response:
        raise RuntimeError("a bug, on purpose")

    @app.post("/read/{rest:path}")
    async def read(request: Request) -> Response:
        return Response(str(len(await request.body())))

    for route in app.router.routes[-2:]:  # let {rest:path} match line breaks too
        route.path_regex = re.compile(route.path_regex.pattern, re.DOTALL)  # type: ignore[attr-defined]
    return app
