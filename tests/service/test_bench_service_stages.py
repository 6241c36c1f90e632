"""``benchmarks/bench_service.py --stages`` still measures what it says: each cut-down server answers the
typical request with the bytes the real service sends, served by :func:`service.server.run` with
``app=`` / ``factory=`` (a real process). No timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_service  # noqa: E402


@pytest.fixture(scope="module")
def real_answer() -> bytes:
    from fastapi.testclient import TestClient

    from mrope.service.app import create_app

    with TestClient(create_app()) as client:
        resp = client.post(
            "/v1/positions", content=orjson.dumps(bench_service.TYPICAL), headers=bench_service.JSON_H
        )
    assert resp.status_code == 200
    return resp.content


@pytest.mark.parametrize("stage", bench_service.STAGES)
def test_stage_server_answers_the_real_bytes(stage: str, real_answer: bytes) -> None:
    proc, base = bench_service.start_server(1, False, stage)
    try:
        body = orjson.dumps(bench_service.TYPICAL)
        resp = httpx.post(base + "/v1/positions", content=body, headers=bench_service.JSON_H, timeout=30)
        assert resp.status_code == 200
        assert resp.content == real_answer
        assert resp.headers["x-request-id"]  # the middlewares are still in place
        # a body the stage decodes is refused as the service refuses it; "canned" never reads it
        bad = httpx.post(
            base + "/v1/positions", content=b'{"model": 1}', headers=bench_service.JSON_H, timeout=30
        )
        assert bad.status_code == (200 if stage == "canned" else 422)
        assert httpx.get(base + "/healthz", timeout=30).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_unknown_stage_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bench_service.STAGE_ENV, "render")
    with pytest.raises(SystemExit, match="must be one of"):
        bench_service.stage_app()


def test_canned_npy_server_answers_the_real_npy_bytes() -> None:
    """``--formats``'s canned servers send the service's own npy answer (int32 here), headers included."""
    from fastapi.testclient import TestClient

    from mrope.service.app import create_app

    body = orjson.dumps(bench_service.TYPICAL)
    with TestClient(create_app()) as client:
        want = client.post("/v1/positions", content=body, headers=bench_service.NPY_H)
    proc, base = bench_service.start_server(1, False, "canned", "npy")
    try:
        got = httpx.post(base + "/v1/positions", content=body, headers=bench_service.NPY_H, timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert got.status_code == want.status_code == 200
    assert got.content == want.content and want.content[:10] == b"\x93NUMPY\x01\x00v\x00"
    assert "'descr': '<i4'" in want.content[:128].decode("latin-1")
    assert got.headers["x-mrope-spans"] == want.headers["x-mrope-spans"]
    assert got.headers["content-type"] == "application/x-npy"
