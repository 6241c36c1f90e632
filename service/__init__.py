"""mrope.service: an HTTP API over the mrope library (FastAPI).

The folder ``service/`` of the repository is installed as the package ``mrope.service`` (see
``[tool.setuptools]`` in pyproject.toml), so every import inside it is relative.
``uvicorn mrope.service.app:app`` or :func:`mrope.service.server.run`; settings from ``MROPE_*`` environment
variables (:mod:`mrope.service.settings`).
"""

from mrope._extras import require

require(
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
