"""mrope.service: an HTTP API over the mrope library (FastAPI).

The folder ``service/`` of the repository is installed as the package ``mrope.service`` (see
``[tool.setuptools]`` in pyproject.toml), so every import inside it is relative.
``uvicorn mrope.service.app:app`` or :func:`mrope.service.run`; :func:`create_app` makes an app for
given :class:`Settings` (default: read from the ``MROPE_*`` environment variables).
"""

from mrope import _extras

_extras.require(
    "mrope.service",
    "service",
    "fastapi",
    "uvicorn",
    "pydantic",
    "orjson",
    "python_multipart",
    "prometheus_client",
    "anyio",
    "httptools",
    "fastapi_offline",
)

from ._protocol import HttpToolsProtocol
from ._server import run
from ._settings import Settings
from .app import create_app

__all__ = ["HttpToolsProtocol", "Settings", "create_app", "run"]
