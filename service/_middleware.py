"""The service's middleware stack, from the route outwards: direct routes, body guard, concurrency limit,
API keys, CORS, access log.

:class:`~mrope.service._operator.AccessLog` is added last, so it is the outermost of the app's
middlewares (only Starlette's server-error middleware is outside it): it gives every request its id
before anything can refuse it, and it answers an unhandled exception itself (a 500 with that id).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from ._direct import DirectRoutes, Endpoint
from ._guards import BodyPace, RequestGuard, Route
from ._operator import AccessLog, ApiKeys, ConcurrencyLimit
from ._paths import ENDPOINTS, HEALTH_PATH, POSITIONS_PATH, PROBE_PATHS, ROPE_INDEX_PATH, UPLOAD_PATH
from ._state import ServiceState


def guard_routes(state: ServiceState) -> dict[str, Route]:
    """What :class:`~mrope.service._guards.RequestGuard` checks on each POST path."""
    settings = state.settings
    json_route = Route(
        settings.max_body_bytes,
        "MROPE_MAX_BODY_BYTES",
        ("application/json",),
        "a JSON body (Content-Type: application/json)",
        negotiates=True,
        body_timeout_s=settings.body_timeout_s,
    )
    return {
        POSITIONS_PATH: json_route,
        ROPE_INDEX_PATH: json_route,
        UPLOAD_PATH: Route(
            settings.max_upload_bytes,
            "MROPE_MAX_UPLOAD_BYTES",
            ("multipart/form-data",),
            "a multipart form (Content-Type: multipart/form-data)",
            negotiates=True,
            body_timeout_s=settings.upload_timeout_s,
            body_timeout_cap="MROPE_UPLOAD_TIMEOUT_S",
        ),
    }


def install_middleware(app: FastAPI, state: ServiceState, direct: Mapping[str, Endpoint]) -> None:
    """Add the service's middlewares to ``app``; ``direct``: the endpoints answered before the router
    (after every other middleware, with the app's exception handlers)."""
    settings = state.settings
    app.add_middleware(DirectRoutes, endpoints=direct, handlers=app.exception_handlers)
    app.add_middleware(
        RequestGuard,
        routes=guard_routes(state),
        default=Route(
            settings.max_body_bytes, "MROPE_MAX_BODY_BYTES", body_timeout_s=settings.body_timeout_s
        ),
        pace=BodyPace(settings.read_timeout_s, float(settings.min_upload_rate)),
    )
    app.add_middleware(
        ConcurrencyLimit, limit=settings.max_concurrent, metrics=state.metrics, exempt=PROBE_PATHS
    )
    if settings.api_key_list:
        app.add_middleware(ApiKeys, keys=settings.api_key_list, open_paths=(HEALTH_PATH,))
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origin_list),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "accept", "x-request-id"],
            expose_headers=["x-request-id", "x-mrope-delta", "x-mrope-num-tokens"],
        )
    app.add_middleware(AccessLog, metrics=state.metrics, endpoints=ENDPOINTS)
