"""mrope.service: an HTTP API over the mrope library (FastAPI).

``uvicorn service.app:app`` or :func:`service.server.run`; settings from ``MROPE_*`` environment
variables (:mod:`service.settings`).
"""
