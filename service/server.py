"""Run the service under uvicorn: :func:`run` is what ``mrope serve`` calls."""

from __future__ import annotations

import uvicorn

APP = "service.app:app"


def run(host: str = "127.0.0.1", port: int = 8000, workers: int = 1, log_level: str = "info") -> None:
    """Serve :data:`APP` on ``host:port`` with ``workers`` processes until interrupted.

    Settings come from ``MROPE_*`` environment variables (every worker reads them at start). The default
    host is loopback only: pass ``host="0.0.0.0"`` deliberately to serve other machines.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1; got {workers!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in [0, 65535]; got {port!r}")
    uvicorn.run(APP, host=host, port=port, workers=workers, log_level=log_level, access_log=False)
