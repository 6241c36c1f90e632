"""The real server: uvicorn in a subprocess on a free loopback port, called over the network.

Both ways of starting it are covered: ``uvicorn mrope.service.app:app`` and :func:`mrope.service._server.run`. The
subprocess is started and always stopped by :func:`service_proc.serve`, whatever the test does.
"""

from __future__ import annotations

import io
import sys

import httpx
import numpy as np
import pytest
from PIL import Image as PILImage
from support.service_proc import rss_mib, serve

import mrope
from mrope.service._server import run


@pytest.mark.timeout(90)
def test_uvicorn_app_over_the_network(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "mrope.service.app:app",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ]
    env = {"MROPE_MAX_SEGMENTS": "100", "MROPE_TMP_DIR": str(tmp_path)}
    with serve(argv, env) as server, httpx.Client(base_url=server.base, timeout=20) as c:
        segs = [
            {"type": "text", "tokens": 4},
            {"type": "image", "grid": [1, 8, 8]},
            {"type": "text", "tokens": 2},
        ]
        resp = c.post("/v1/positions", json={"model": "qwen2.5-vl", "segments": segs})
        assert resp.status_code == 200, resp.text
        lib = mrope.build_positions(
            [mrope.Text(4), mrope.Image(grid=(1, 8, 8)), mrope.Text(2)], model="qwen2.5-vl"
        )
        assert resp.json()["positions"] == lib.ids.tolist()
        npy = c.post(
            "/v1/positions",
            json={"model": "qwen2.5-vl", "segments": segs},
            headers={"accept": "application/x-npy"},
        )
        assert np.array_equal(np.load(io.BytesIO(npy.content)), lib.ids)
        # the environment reached the server: its segment cap is 100
        over = c.post(
            "/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1}] * 101}
        )
        assert over.status_code == 413 and over.json()["error"]["cap"] == "MROPE_MAX_SEGMENTS"
        buf = io.BytesIO()
        PILImage.new("RGB", (320, 240)).save(buf, format="PNG")
        up = c.post(
            "/v1/positions/upload", data={"model": "qwen2-vl"}, files=[("files", ("a.png", buf.getvalue()))]
        )
        assert up.status_code == 200, up.text
        assert up.json()["files"][0]["grid"] == [1, 18, 22]  # 240x320 -> 252x308 pixels
        bad = c.post("/v1/positions", content=b"{nope", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        assert c.get("/openapi.json").json()["info"]["title"] == "mrope"
        # huge responses do not stay resident once sent
        huge = {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1_000_000}]}
        c.post("/v1/positions", json=huge)
        before = rss_mib(server.pid)
        for accept in ["application/json", "application/x-npy; dtype=int64"] * 3:  # 24 MB of int64
            resp = c.post("/v1/positions", json=huge, headers={"accept": accept})
            assert resp.status_code == 200 and len(resp.content) > 20_000_000
        assert rss_mib(server.pid) - before < 40, (before, rss_mib(server.pid))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(90)
def test_server_run_function():
    with serve() as server:  # service_proc.RUN_SERVER: service.server.run on the test port
        assert server.base.startswith("http://127.0.0.1:")
        assert httpx.get(server.base + "/v1/presets", timeout=10).json()["presets"].keys() >= {
            "qwen2-vl",
            "qwen3-vl",
        }


def test_run_rejects_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        run(workers=0)
    with pytest.raises(ValueError, match="port"):
        run(port=70000)
