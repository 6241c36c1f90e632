"""``/docs`` (Swagger UI) and ``/redoc`` served with no internet: the pinned assets of the installed
``fastapi-offline`` package (Swagger UI bundle and CSS, ReDoc standalone, favicon) are served from
``/docs-assets``; the pages name no other host (no CDN, no Google fonts)."""

from __future__ import annotations

import os

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
ASSETS_PATH = "/docs-assets"
ASSETS_DIR = os.path.join(os.path.dirname(fastapi_offline.__file__), "static")
"""Swagger UI and ReDoc as the ``fastapi-offline`` package ships them."""


def install(app: FastAPI) -> None:
    """Add the two pages and their assets to ``app`` (made with ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    title = f"{app.title} {app.version}"

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
        )

    @app.get(REDOC_PATH, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
