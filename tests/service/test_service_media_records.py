"""``/v1/positions`` JSON answers carry ``media``: each image's and video's record of how the service read
and sized it (``mrope.media.MediaRecord.as_dict``), ``null`` for one given by its grid; npy and program
answers carry none. Over a real server process (uvicorn on loopback), media sent as ``data:`` URLs (read
once the URL allowlist is set). Expected sizes are derived by hand from Qwen2-VL's resize rule (sides
rounded to multiples of 28 pixels: transformers models/qwen2_vl/image_processing_qwen2_vl.py
``smart_resize``)."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image as PILImage
from support.service_proc import serve

pytestmark = pytest.mark.timeout(120)


def data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    PILImage.new("RGB", (width, height), (10, 20, 30)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_positions_json_carries_the_media_records():
    env = {"MROPE_MEDIA_URL_HOSTS": "127.0.0.1:9"}  # an allowlist: data: URLs are then read
    body = {
        "model": "qwen2-vl",
        "segments": [
            {"type": "text", "tokens": 3},
            {"type": "image", "path": data_url(320, 240)},
            {"type": "image", "grid": [1, 8, 8]},
            {"type": "video", "frames": [data_url(112, 56)] * 4},
        ],
    }
    with serve(env=env) as server, httpx.Client(base_url=server.base, timeout=30) as c:
        resp = c.post("/v1/positions", json=body)
        assert resp.status_code == 200, resp.text
        media = resp.json()["media"]
        assert len(media) == 3 and media[1] is None  # the image given by its grid has no record
        image, video = media[0], media[2]
        # 240 x 320 px: 240 / 28 = 8.6 -> 9 rows of 28 = 252, 320 / 28 = 11.4 -> 11 columns = 308
        assert (image["kind"], image["size"], image["frames"], image["route"]) == (
            "image",
            [252, 308],
            1,
            "processor",
        )
        # 56 x 112 px frames are multiples of 28 already: kept; the four frame images are read
        assert (video["kind"], video["size"], video["frames"]) == ("video", [56, 112], 4)
        assert image["sources"] and all(isinstance(v, str) for v in image["sources"].values())
        # the sizing keys of an image name where each value came from: the model's own defaults here
        assert {"min_pixels", "max_pixels"} <= set(image["sources"])
        # npy and program answers carry no media (negative control: the JSON one does)
        for accept in ("application/x-npy", "application/x-mrope-program"):
            other = c.post("/v1/positions", json=body, headers={"accept": accept})
            assert other.status_code == 200 and "x-mrope-media" not in other.headers
        # a request of grids only: one null per image and video
        grids = {
            "model": "qwen2-vl",
            "segments": [{"type": "image", "grid": [1, 8, 8]}, {"type": "text", "tokens": 2}],
        }
        assert c.post("/v1/positions", json=grids).json()["media"] == [None]
        # the OpenAPI schema documents the field
        schema = c.get("/openapi.json").json()["components"]["schemas"]
        assert "media" in schema["PositionsResponse"]["properties"] and "MediaOut" in schema
