"""The FastAPI app: a thin HTTP face over :func:`mrope.build_positions` and :func:`mrope.numpy_rope_index`.

Run it with ``uvicorn mrope.service.app:app`` (settings from ``MROPE_*`` environment variables) or
:func:`mrope.service.run`. :func:`create_app` builds an app from explicit :class:`mrope.service.Settings`
(tests use it): the endpoints are in :mod:`mrope.service._routes`,
the middlewares in :mod:`mrope.service._middleware`, what they share in :mod:`mrope.service._state`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI

import mrope
from mrope._errors import MRopeWarning

from . import _docs as docs
from ._errors import install_handlers
from ._memory import pin_mmap_threshold
from ._middleware import install_middleware
from ._openapi import ServiceApp
from ._page import install_page
from ._routes import Routes, add_routes
from ._settings import Settings
from ._state import ServiceState
from ._uploads import sweep_stale_spools

log = logging.getLogger("mrope.service")


def lifespan(state: ServiceState) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: at start, quiet library warnings, pin the mmap threshold, sweep upload
    folders left by dead processes, then mark ``state`` ready; not ready again at shutdown."""

    @asynccontextmanager
    async def run(_: FastAPI) -> AsyncIterator[None]:
        # notes are returned in every response; the warning copies would only flood the server log
        warnings.filterwarnings("ignore", category=MRopeWarning)
        pin_mmap_threshold()
        swept = sweep_stale_spools(state.settings.temp_root)
        if swept:
            log.warning(
                "removed %d upload folder(s) left by dead processes: %s", len(swept), ", ".join(swept)
            )
        state.ready = True
        try:
            yield
        finally:
            state.ready = False

    return run


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service app for ``settings`` (default: from the environment)."""
    settings = settings if settings is not None else Settings.from_env()
    settings.check()
    state = ServiceState.from_settings(settings)
    app = ServiceApp(
        title="mrope",
        version=mrope.__version__,
        summary="Multimodal M-RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V) over HTTP",
        lifespan=lifespan(state),
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = state
    install_handlers(app)
    routes = Routes(state)
    install_middleware(app, state, routes.direct)
    docs.install(app)
    install_page(app)  # GET /inspect: the inspection page
    add_routes(app, routes)
    return app


_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    """``mrope.service.app.app``: the app for the environment's settings, made on first access (so importing
    this module never reads the environment; ``uvicorn mrope.service.app:app`` triggers it)."""
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "create_app"]  # noqa: F822 - app is made on first access (__getattr__)
