"""mrope.service: an HTTP API over the mrope library (FastAPI).

``uvicorn mrope.service.app:app`` or :func:`mrope.service.server.run`; settings from ``MROPE_*`` environment
variables (:mod:`mrope.service.settings`).
"""
