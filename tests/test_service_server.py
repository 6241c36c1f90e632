"""The real server: uvicorn in a subprocess on a free loopback port, called over the network.

Both ways of starting it are covered: ``uvicorn service.app:app`` and :func:`service.server.run`. The
subprocess is always stopped (terminate, then kill), whatever the test does.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image as PILImage

import mrope
from service.server import run

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


@contextmanager
def serve(
    argv: list[str], env: dict[str, str] | None = None, startup_s: float = 30.0
) -> Iterator[tuple[str, int]]:
    """Start ``argv`` (which must serve on the port in ``MROPE_TEST_PORT``), wait for /healthz, yield the
    base URL and the pid, always stop the process."""
    port = free_port()
    proc_env = {**os.environ, **(env or {}), "MROPE_TEST_PORT": str(port)}
    argv = [a.replace("{port}", str(port)) for a in argv]
    proc = subprocess.Popen(argv, cwd=ROOT, env=proc_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                raise AssertionError(f"server exited with {proc.returncode} before answering:\n{out}")
            try:
                if httpx.get(base + "/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not answer /healthz within {startup_s} s")
            time.sleep(0.05)
        yield base, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


@pytest.mark.timeout(90)
def test_uvicorn_app_over_the_network(tmp_path):
    argv = [sys.executable, "-m", "uvicorn", "service.app:app", "--host", "127.0.0.1", "--port", "{port}"]
    env = {"MROPE_MAX_SEGMENTS": "100", "MROPE_TMP_DIR": str(tmp_path)}
    with serve(argv, env) as (base, pid), httpx.Client(base_url=base, timeout=20) as c:
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
        before = rss_mib(pid)
        for accept in ["application/json", "application/x-npy"] * 3:
            resp = c.post("/v1/positions", json=huge, headers={"accept": accept})
            assert resp.status_code == 200 and len(resp.content) > 20_000_000
        assert rss_mib(pid) - before < 40, (before, rss_mib(pid))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(90)
def test_server_run_function():
    code = "import os; from service.server import run; run(port=int(os.environ['MROPE_TEST_PORT']), log_level='warning')"
    with serve([sys.executable, "-c", code]) as (base, _):
        assert base.startswith("http://127.0.0.1:")
        assert httpx.get(base + "/v1/presets", timeout=10).json()["presets"].keys() >= {
            "qwen2-vl",
            "qwen3-vl",
        }


def test_run_rejects_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        run(workers=0)
    with pytest.raises(ValueError, match="port"):
        run(port=70000)
