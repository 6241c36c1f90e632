"""The service's URL paths, and which of them the metrics label and the concurrency limit exempts."""

from __future__ import annotations

from . import _docs as docs
from ._page import PAGE_PATH

POSITIONS_PATH = "/v1/positions"
ROPE_INDEX_PATH = "/v1/rope-index"
UPLOAD_PATH = "/v1/positions/upload"
PRESETS_PATH = "/v1/presets"
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
OPENAPI_PATH = "/openapi.json"
PROBE_PATHS = (HEALTH_PATH, READY_PATH, METRICS_PATH)
"""Not counted against MROPE_MAX_CONCURRENT: an overloaded worker still answers its probes."""
ENDPOINTS = (
    POSITIONS_PATH,
    ROPE_INDEX_PATH,
    UPLOAD_PATH,
    PRESETS_PATH,
    *PROBE_PATHS,
    docs.DOCS_PATH,
    docs.REDOC_PATH,
    OPENAPI_PATH,
    PAGE_PATH,
)
"""The paths metrics are labelled with (any other is "other")."""
