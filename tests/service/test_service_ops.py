"""What an operator needs: API keys, CORS, a concurrency limit, request ids, an access log,
readiness, Prometheus metrics, offline docs, and a temp budget that slow uploads cannot hold.

In-process (TestClient) where one request at a time tells it; a real server where the log, several
connections at once, or `mrope serve` itself is the point.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import sys
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image as PILImage
from prometheus_client.parser import text_string_to_metric_families
from support.checkpoints import qwen2_5_vl_config
from support.service_proc import serve, trickle

import mrope
import mrope.media
from mrope.service import Settings
from mrope.service._settings import SettingsError
from mrope.service.app import create_app

BODY = {
    "model": "qwen2-vl",
    "segments": [{"type": "text", "tokens": 5}, {"type": "image", "grid": [1, 4, 4]}],
}
KEYS = "k1-secret,k2-secret"


def png() -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (64, 48)).save(buf, format="PNG")
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ API keys


def test_api_keys(caplog):
    caplog.set_level(logging.INFO, logger="mrope.access")
    with TestClient(create_app(Settings(api_keys=KEYS))) as c:
        assert c.get("/healthz").status_code == 200  # liveness stays open
        for method, path in [
            ("POST", "/v1/positions"),
            ("GET", "/v1/presets"),
            ("GET", "/readyz"),
            ("GET", "/metrics"),
            ("GET", "/docs"),
            ("GET", "/openapi.json"),
            ("GET", "/nowhere"),
        ]:
            for headers in [{}, {"authorization": "Bearer nope"}, {"authorization": "Basic k1-secret"}]:
                resp = c.request(method, path, json=BODY if method == "POST" else None, headers=headers)
                assert resp.status_code == 401, (path, headers, resp.text)
                err = resp.json()["error"]
                assert err["code"] == "unauthorized" and "MROPE_API_KEYS" in err["message"]
                assert resp.headers["www-authenticate"] == "Bearer"
                assert "secret" not in resp.text
        for key in KEYS.split(","):
            resp = c.post("/v1/positions", json=BODY, headers={"authorization": f"Bearer {key}"})
            assert resp.status_code == 200, resp.text
        assert c.get("/metrics", headers={"authorization": "bearer k2-secret"}).status_code == 200
    assert "secret" not in caplog.text and "401" in caplog.text
    with TestClient(create_app(Settings())) as c:  # no keys: open
        assert c.post("/v1/positions", json=BODY).status_code == 200
    with pytest.raises(SettingsError, match="MROPE_API_KEYS"):
        Settings.from_env({"MROPE_API_KEYS": " , "})
    assert "secret" not in repr(Settings(api_keys=KEYS))


# ---------------------------------------------------------------------------------------------- CORS


def test_cors_off_unless_configured():
    preflight = {"origin": "https://ui.example", "access-control-request-method": "POST"}
    with TestClient(create_app(Settings())) as c:
        resp = c.post("/v1/positions", json=BODY, headers={"origin": "https://ui.example"})
        assert resp.status_code == 200 and "access-control-allow-origin" not in resp.headers
        assert "access-control-allow-origin" not in c.options("/v1/positions", headers=preflight).headers
    with TestClient(create_app(Settings(cors_origins="https://ui.example"))) as c:
        resp = c.options("/v1/positions", headers=preflight)
        assert resp.status_code == 200
        assert resp.headers["access-control-allow-origin"] == "https://ui.example"
        resp = c.post("/v1/positions", json=BODY, headers={"origin": "https://ui.example"})
        assert resp.headers["access-control-allow-origin"] == "https://ui.example"
        other = c.post("/v1/positions", json=BODY, headers={"origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


# ------------------------------------------------------------------------------- request ids, readyz


def test_request_ids_and_readiness():
    with TestClient(create_app(Settings())) as c:
        ok = c.post("/v1/positions", json=BODY)
        rid = ok.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", rid)
        assert c.post("/v1/positions", json=BODY).headers["x-request-id"] != rid
        mine = c.get("/healthz", headers={"x-request-id": "lb-1234.abc"})
        assert mine.headers["x-request-id"] == "lb-1234.abc"
        odd = c.get("/healthz", headers={"x-request-id": "has spaces\tand tabs"})
        assert re.fullmatch(r"[0-9a-f]{32}", odd.headers["x-request-id"])
        # every error body carries the id: validation, caps, routing, content type, bad JSON
        for resp in [
            c.post("/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "bogus"}]}),
            c.post("/v1/positions", content=b"{nope", headers={"content-type": "application/json"}),
            c.post("/v1/positions", content=b"{}", headers={"content-type": "text/plain"}),
            c.get("/nowhere"),
            c.delete("/v1/positions"),
            c.post("/v1/positions/upload", data={"model": "qwen2-vl"}),
        ]:
            assert resp.status_code >= 400
            assert resp.json()["error"]["request_id"] == resp.headers["x-request-id"], resp.text
        assert c.get("/readyz").json()["status"] == "ok"
    app = create_app(Settings())
    with TestClient(app) as c:
        app.state.service.ready = False  # what a worker shutting down says
        resp = c.get("/readyz")
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "not_ready"
        assert c.get("/healthz").status_code == 200  # alive all the same


# ------------------------------------------------------------------------------------------- metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_prometheus_metrics(tmp_path):
    with TestClient(create_app(Settings(tmp_dir=str(tmp_path)))) as c:
        tokens = 0
        for _ in range(3):
            tokens += c.post("/v1/positions", json=BODY).json()["num_tokens"]
        c.post("/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "bogus"}]})
        c.post(
            "/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1}] * 5000}
        )
        ri = c.post("/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[1, 2, 3], [4, 5, 6]]})
        assert ri.status_code == 200
        tokens += 6
        up = c.post("/v1/positions/upload", data={"model": "qwen2-vl"}, files=[("files", ("a.png", png()))])
        assert up.status_code == 200
        tokens += up.json()["num_tokens"]
        for i in range(50):  # random paths share one label
            c.get(f"/random-{i}")
        resp = c.get("/metrics")
    assert resp.headers["content-type"].startswith("text/plain")
    got = samples(resp.text)
    ok = ("endpoint", "/v1/positions"), ("method", "POST"), ("status", "200")
    assert got[("mrope_requests_total", ok)] == 3
    assert (
        got[("mrope_requests_total", (("endpoint", "/v1/positions"), ("method", "POST"), ("status", "422")))]
        == 1
    )
    assert got[("mrope_requests_total", (("endpoint", "other"), ("method", "GET"), ("status", "404")))] == 50
    assert (
        got[("mrope_request_duration_seconds_count", (("endpoint", "/v1/positions"), ("status", "200")))] == 3
    )
    assert got[("mrope_tokens_built_total", ())] == tokens
    assert got[("mrope_rejections_total", (("reason", "validation_error"),))] == 1
    assert got[("mrope_rejections_total", (("reason", "too_many_segments"),))] == 1
    assert got[("mrope_rejections_total", (("reason", "not_found"),))] == 50
    assert got[("mrope_media_seconds_count", (("kind", "image"),))] == 1
    assert got[("mrope_media_threads_busy", ())] == 0
    assert got[("mrope_requests_in_flight", ())] == 0
    assert not any("random" in str(key) for key in got)


def test_in_flight_gauge_counts_running_requests():
    """``mrope_requests_in_flight`` is the concurrency limit's count: 1 while a request runs, probes not
    counted, 0 after."""
    import anyio

    from mrope.service._metrics import Metrics
    from mrope.service._operator import ConcurrencyLimit

    metrics = Metrics()
    seen = []

    async def inner(scope, receive, send) -> None:
        seen.append(samples(metrics.render().decode())[("mrope_requests_in_flight", ())])

    limit = ConcurrencyLimit(inner, limit=4, metrics=metrics, exempt=("/healthz",))
    for path in ("/v1/positions", "/healthz"):
        anyio.run(limit, {"type": "http", "path": path}, None, None)
    assert seen == [1, 0]
    assert samples(metrics.render().decode())[("mrope_requests_in_flight", ())] == 0


# ---------------------------------------------------------------------------------------- docs


def test_docs_work_offline():
    with TestClient(create_app(Settings())) as c:
        for path in ("/docs", "/redoc"):
            page = c.get(path)
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            html = page.text
            assert not re.search(r"(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html), html
            assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
            assert len(assets) >= 2, html
            for url in assets:
                asset = c.get(url)
                assert asset.status_code == 200 and len(asset.content) > 1000, url
            assert "/openapi.json" in html
        spec = c.get("/openapi.json").json()
        body = spec["paths"]["/v1/positions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/PositionsRequest"}
        assert "PositionsRequest" in spec["components"]["schemas"]
        assert "RopeIndexRequest" in spec["components"]["schemas"]


# ------------------------------------------------------------------- concurrency, access log, budget


def open_half_body(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"
    )
    return s


@pytest.mark.timeout(120)
def test_concurrency_limit_and_access_log_from_mrope_serve():
    argv = [sys.executable, "-m", "mrope", "serve", "--port", "{port}"]
    env = {"MROPE_MAX_CONCURRENT": "2", "MROPE_READ_TIMEOUT_S": "30", "MROPE_BODY_TIMEOUT_S": "30"}
    with serve(argv, env) as srv:
        with httpx.Client(base_url=srv.base, timeout=10) as c:
            ok = c.post("/v1/positions", json=BODY, headers={"x-request-id": "req-ok-1"})
            assert ok.status_code == 200
            bad = c.post("/v1/positions", json={"model": "nope", "segments": []})
            bad_id = bad.json()["error"]["request_id"]
            held = [open_half_body(srv.port), open_half_body(srv.port)]  # two requests in progress
            try:
                time.sleep(0.3)
                busy = c.post("/v1/positions", json=BODY)
                assert busy.status_code == 503, busy.text
                err = busy.json()["error"]
                assert err["code"] == "overloaded" and err["cap"] == "MROPE_MAX_CONCURRENT"
                assert busy.headers["retry-after"] == "1"
                assert c.get("/healthz").status_code == 200  # probes are not counted
                assert c.get("/readyz").status_code == 200
            finally:
                for s in held:
                    s.close()
            deadline = time.monotonic() + 10
            while c.post("/v1/positions", json=BODY).status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert c.post("/v1/positions", json=BODY).status_code == 200
        time.sleep(0.3)
        log = srv.log()
    # one access line per request, by default, with its id (and the error code of errors)
    assert re.search(r'"POST /v1/positions" 200 \d+B [\d.]+ms id=req-ok-1', log), log
    assert re.search(rf'"POST /v1/positions" 422 \d+B [\d.]+ms id={bad_id} error=validation_error', log), log
    assert re.search(r'"POST /v1/positions" 503 .* error=overloaded', log), log


@pytest.mark.timeout(120)
def test_slow_upload_cannot_hold_the_temp_budget(tmp_path):
    env = {
        "MROPE_TMP_DIR": str(tmp_path),
        "MROPE_MAX_TEMP_BYTES": str(2_000_000),
        "MROPE_READ_TIMEOUT_S": "1",
        "MROPE_MIN_UPLOAD_RATE": str(1_000_000),
    }
    with serve(env=env) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        boundary = b"xyzzy"
        part = (
            b"--" + boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="a.bin"\r\n\r\n'
        )
        s.sendall(
            b"POST /v1/positions/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary="
            + boundary
            + b"\r\nContent-Length: 3000000\r\n\r\n"
            + part
            + b"\0" * 1_900_000
        )
        time.sleep(0.5)
        rng = np.random.default_rng(0)
        buf = io.BytesIO()
        PILImage.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(buf, format="PNG")
        image = buf.getvalue()  # ~360 KB: more than the budget has left
        with httpx.Client(base_url=srv.base, timeout=30) as c:

            def upload() -> httpx.Response:
                return c.post(
                    "/v1/positions/upload", data={"model": "qwen2-vl"}, files=[("files", ("a.png", image))]
                )

            first = upload()
            assert first.status_code == 503 and first.json()["error"]["code"] == "storage_busy", first.text
            # the slow upload keeps trickling, far below MROPE_MIN_UPLOAD_RATE: it is cut off
            got = trickle(s, b"\0", tries=50, every_s=0.2)
            s.close()
            assert got.startswith(b"HTTP/1.1 408") and b"MROPE_MIN_UPLOAD_RATE" in got, got[:300]
            second = upload()
            assert second.status_code == 200, second.text  # the budget is free again
            assert second.json()["files"][0]["grid"] == [1, 22, 28]  # 300x400 -> 308x392 pixels
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------- MROPE_MODEL_DIR

FINE_TUNE_CONFIG = qwen2_5_vl_config(tokens_per_second=4)  # a fine-tune of Qwen2.5-VL
FINE_TUNE_PREPROCESSOR = {"min_pixels": 3136, "max_pixels": 200_704, "patch_size": 14, "merge_size": 2}


def test_model_dir_serves_a_checkpoint(tmp_path):
    import json

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(FINE_TUNE_CONFIG))
    (folder / "preprocessor_config.json").write_text(json.dumps(FINE_TUNE_PREPROCESSOR))
    checkpoint = mrope.from_pretrained(folder)
    settings = Settings.from_env({"MROPE_MODEL_DIR": str(folder), "MROPE_MODEL_NAME": "my-vl"})
    segments = [
        {"type": "text", "tokens": 4},
        {"type": "image", "height": 1080, "width": 1920},
        {"type": "video", "grid": [4, 8, 8], "second_per_grid": 1.0},
    ]
    lib_segs = [
        mrope.Text(4),
        mrope.Image(grid=mrope.media.image_grid(1080, 1920, rules=checkpoint.rules)),
        mrope.Video(grid=(4, 8, 8), second_per_grid=1.0),
    ]
    with TestClient(create_app(settings)) as c:
        mine = c.post("/v1/positions", json={"model": "my-vl", "segments": segments})
        assert mine.status_code == 200, mine.text
        want = mrope.build_positions(lib_segs, model=checkpoint)
        assert mine.json()["positions"] == want.ids.tolist()
        # the checkpoint's values, not the preset's: fewer image tokens, twice the time step
        preset = c.post("/v1/positions", json={"model": "qwen2.5-vl", "segments": segments}).json()
        assert mine.json()["num_tokens"] < preset["num_tokens"]
        ids = [[1, 151652, 151655, 151655, 151655, 151655, 151653, 2]]
        ri = c.post(
            "/v1/rope-index", json={"model": "my-vl", "input_ids": ids, "image_grid_thw": [[1, 4, 4]]}
        )
        assert ri.status_code == 200, ri.text
        pos, deltas = mrope.numpy_rope_index(ids, [[1, 4, 4]], model=checkpoint)
        assert ri.json()["position_ids"] == pos.tolist() and ri.json()["deltas"] == deltas.tolist()
        up = c.post("/v1/positions/upload", data={"model": "my-vl"}, files=[("files", ("a.png", png()))])
        assert up.status_code == 200, up.text
        assert up.json()["files"][0]["grid"] == list(mrope.media.image_grid(48, 64, rules=checkpoint.rules))
        unknown = c.post("/v1/positions", json={"model": "other-vl", "segments": segments})
        assert unknown.status_code == 422
    with pytest.raises(SettingsError, match="MROPE_MODEL_DIR"):
        Settings.from_env({"MROPE_MODEL_DIR": str(tmp_path / "missing")})
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="MROPE_MODEL_DIR"):
        create_app(Settings(model_dir=str(tmp_path / "empty")))
