"""Run the service under uvicorn: :func:`run` is what ``mrope serve`` calls.

Besides the app it sets what only the server can: the protocol with a header deadline and a connection
limit (:mod:`mrope.service._protocol`), the shutdown grace period (``MROPE_SHUTDOWN_GRACE_S``: after SIGTERM,
requests in progress get that long, then they are cancelled and the process exits, whatever clients
do), httptools and uvloop, and an access log (one line per request with its id, on logger
``mrope.access``).
"""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from ._settings import Settings

APP = "mrope.service.app:app"
PROTOCOL = "mrope.service:HttpToolsProtocol"
ACCESS_LOGGER = "mrope.access"


def log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging configuration plus the ``mrope`` loggers (access lines at INFO when on)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["mrope"] = {
        "()": "logging.Formatter",
        "fmt": "%(asctime)s %(levelname)s %(name)s: %(message)s",
    }
    config["handlers"]["mrope"] = {
        "formatter": "mrope",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    config["loggers"]["mrope"] = {"handlers": ["mrope"], "level": "INFO", "propagate": False}
    config["loggers"][ACCESS_LOGGER] = {
        "handlers": ["mrope"],
        "level": "INFO" if access_log else "WARNING",
        "propagate": False,
    }
    return config


def run(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
    access_log: bool = True,
    app: str = APP,
    factory: bool = False,
) -> None:
    """Serve :data:`APP` on ``host:port`` with ``workers`` processes until interrupted.

    Settings come from ``MROPE_*`` environment variables (every worker reads them at start). The default
    host is loopback only: pass ``host="0.0.0.0"`` deliberately to serve other machines. ``app`` is
    another ``module:attribute`` to serve with the same server settings (``factory``: the attribute is
    a function that returns the app; ``benchmarks/bench_service.py --stages`` serves variants so).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1; got {workers!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in [0, 65535]; got {port!r}")
    settings = Settings.from_env()  # a bad variable fails here, before any worker starts
    uvicorn.run(
        app,
        factory=factory,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,  # the app writes its own access lines, with the request id
        log_config=log_config(access_log),
        http=PROTOCOL,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        timeout_graceful_shutdown=settings.shutdown_grace_s,  # type: ignore[arg-type]
        timeout_keep_alive=5,
    )
