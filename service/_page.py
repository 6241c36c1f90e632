"""The inspection page: ``GET /inspect`` (HTML, script and style served from the package, no CDN).

Paste a ``POST /v1/positions`` request or drop images and videos (``POST /v1/positions/upload``): the
page shows the span table, the delta and a picture of the layout (span kinds and the t, h, w values
along the tokens), and saves the positions as ``.npy``. It calls the service's own endpoints, so it
shows exactly what a client gets, error messages included.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

PAGE_PATH = "/inspect"
_ASSETS = {"inspect.js": "text/javascript; charset=utf-8", "inspect.css": "text/css; charset=utf-8"}
_SECURITY = {
    # everything the page uses comes from this service: no other origin may be contacted
    "content-security-policy": "default-src 'self'; img-src 'self' data: blob:; connect-src 'self'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
}


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def install_page(app: FastAPI) -> None:
    """Add ``GET /inspect`` and its two assets to ``app``."""
    page = _asset("inspect.html")
    assets = {name: _asset(name) for name in _ASSETS}

    @app.get(PAGE_PATH, response_class=HTMLResponse, include_in_schema=False)
    async def inspect_page() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=_SECURITY)

    for name, media_type in _ASSETS.items():

        def serve(name: str = name, media_type: str = media_type) -> Response:
            return Response(assets[name], media_type=media_type, headers=_SECURITY)

        app.add_api_route(f"{PAGE_PATH}/{name}", serve, methods=["GET"], include_in_schema=False)
