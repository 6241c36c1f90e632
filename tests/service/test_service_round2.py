"""The service under attack, round 2 (issue 23, items 3, 5, 6 and 7), against real server processes.

One server like ``mrope serve`` (:func:`service_proc.serve`) for the bodies, and one serving
:mod:`support.failing_app` (the same app plus routes that fail like a bug) for what happens after a 500
and for what reaches the error log. Every socket has a timeout; every loop is bounded.
"""

from __future__ import annotations

import io
import json
import socket
import sys
import time

import httpx
import pytest
from PIL import Image as PILImage
from support.failing_app import FACTORY
from support.service_proc import ROOT, rss_mib, serve

from mrope.service.logtext import log_text

pytestmark = pytest.mark.timeout(240)

BAD_FORMATS = ["{0.foo}", "{0[0]}", "{!r}", "{:{}}", "{}{}", "{x}", "no field", "{:q}"]


@pytest.fixture(scope="module")
def server():
    with serve() as srv:
        yield srv


@pytest.fixture(scope="module")
def failing_server():
    code = (
        "import os; from mrope.service.server import run; "
        f"run(port=int(os.environ['MROPE_TEST_PORT']), log_level='warning', app={FACTORY!r}, factory=True)"
    )
    with serve([sys.executable, "-c", code], env={"PYTHONPATH": str(ROOT / "tests")}) as srv:
        yield srv


def png() -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (56, 56), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def error_of(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text[:2000]
    return resp.json()["error"]


# ------------------------------------------------------------------ 5. timestamp_format, boundary


@pytest.mark.parametrize("fmt", BAD_FORMATS)
def test_timestamp_format_is_one_float_field_on_every_route(server, fmt):
    """Anything but one positional ``{}`` / ``{:spec}`` field is a 422 that says what was expected and
    what came, on all three routes that take rules ({0.foo} and {0[0]} were 500s)."""
    rules = {"timestamp_format": fmt}
    answers = [
        httpx.post(
            server.base + "/v1/positions",
            json={"model": "qwen3-vl", "segments": [{"type": "text", "tokens": 2}], "rules": rules},
            timeout=30,
        ),
        httpx.post(
            server.base + "/v1/rope-index",
            json={"model": "qwen2-vl", "input_ids": [[1, 2]], "rules": rules},
            timeout=30,
        ),
        httpx.post(
            server.base + "/v1/positions/upload",
            data={"model": "qwen2-vl", "rules": json.dumps(rules)},
            files=[("files", ("a.png", png(), "image/png"))],
            timeout=30,
        ),
    ]
    for resp in answers:
        message = error_of(resp, 422)["message"]
        assert "timestamp_format" in message and "{:spec}" in message, message
        assert repr(fmt) in message or json.dumps(fmt) in message, message


@pytest.mark.parametrize("fmt", ["<{:.1f} seconds>", "{:d}", "{:.1f} seconds", "{{}} {:>8.2f}"])
def test_timestamp_formats_of_one_field_still_work(server, fmt):
    resp = httpx.post(
        server.base + "/v1/positions",
        json={
            "model": "qwen2-vl",
            "segments": [{"type": "text", "tokens": 2}],
            "rules": {"timestamp_format": fmt},
        },
        timeout=30,
    )
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("length", [70, 257, 5000])
def test_long_multipart_boundary_is_a_client_error(server, length):
    boundary = "b" * length
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen2-vl\r\n--{boundary}--\r\n'
    ).encode()
    resp = httpx.post(
        server.base + "/v1/positions/upload",
        content=body,
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        timeout=30,
    )
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.json()["error"]["code"] in ("invalid_multipart", "invalid_form"), resp.text


# ------------------------------------------------------------------------ 3. tile_order, tile count


@pytest.mark.parametrize(
    "image",
    [
        {"type": "image", "grid": [1, 4, 4], "tiles": [10000, 5000], "tile_order": [0]},
        {"type": "image", "grid": [1, 4, 4], "tiles": [2147483647, 3]},
        {"type": "image", "grid": [1, 4, 4], "tiles": [2147483647, 3], "tile_order": [0, 1]},
        {"type": "image", "grid": [1, 4, 4], "tiles": [2, 2], "tile_order": list(range(100_000))},
    ],
)
def test_tiles_are_checked_before_anything_is_allocated(server, image):
    before = rss_mib(server.pid)
    start = time.monotonic()
    resp = httpx.post(
        server.base + "/v1/positions", json={"model": "qwen2-vl", "segments": [image]}, timeout=60
    )
    took = time.monotonic() - start
    assert error_of(resp, 422)["code"] in ("layout_error", "validation_error")
    assert took < 1.0, took
    assert rss_mib(server.pid) < before + 200
    assert httpx.get(server.base + "/healthz", timeout=5).status_code == 200


# ------------------------------------------------------------------ 6. keep-alive after an error


def exchange(port: int, raw: bytes, responses: int, timeout_s: float = 10.0) -> tuple[bytes, bool]:
    """Send ``raw`` at once; read until ``responses`` answers came (each ends with its Content-Length
    body) or the server closed; returns the bytes and whether the server closed the connection."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(raw)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(split_responses(got)) >= responses:
                return got, False
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                return got, True
            got += chunk
    return got, False


def split_responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The complete responses in ``data``: (status, headers, body)."""
    out = []
    while b"\r\n\r\n" in data:
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        n = int(headers.get("content-length", "0"))
        if len(rest) < n:
            break
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def test_request_pipelined_after_a_500_is_answered(failing_server):
    raw = b"GET /fail/now HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    got, closed = exchange(failing_server.port, raw, 2)
    answers = split_responses(got)
    assert answers and answers[0][0] == 500, got[:2000]
    assert json.loads(answers[0][2])["error"]["code"] == "internal_error"
    if closed and len(answers) == 1:  # a 500 that closes must say so
        assert answers[0][1].get("connection") == "close", answers[0][1]
    assert [a[0] for a in answers] == [500, 200], got[:2000]
    # a 500 given before the body was read closes the connection, and says so
    raw = b"POST /fail/early HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello"
    got, closed = exchange(failing_server.port, raw, 2, timeout_s=5)
    answers = split_responses(got)
    assert closed and [a[0] for a in answers] == [500], got[:2000]
    assert answers[0][1].get("connection") == "close", answers[0][1]


def test_every_closing_error_says_connection_close(server):
    """An answer given before its body was read closes the connection, and says so; one given after
    the whole body was read keeps it, so the pipelined request is answered."""
    body = b'{"model": "qwen2-vl", "segments": [], "rules": {"timestamp_format": "{0[0]}"}}'
    raw = (
        b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    ) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    got, closed = exchange(server.port, raw, 2)
    assert [a[0] for a in split_responses(got)] == [422, 200], got[:2000]
    over = b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
    got, closed = exchange(server.port, over + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 2, timeout_s=5)
    answers = split_responses(got)
    assert answers[0][0] == 415, got[:2000]
    if closed:
        assert answers[0][1].get("connection") == "close", answers[0][1]


# ----------------------------------------------------------------------------- 7. log injection

FORGED = "2026-01-01 00:00:00,000 INFO mrope.access: FORGED"


def assert_one_line_per_request(log: str) -> None:
    assert "\x00" not in log and "\x1b" not in log
    for line in log.splitlines():
        assert not line.startswith(FORGED[:24]), line
        if "FORGED" in line:
            assert "\\r\\n" in line or "\\n" in line, line


def test_raw_paths_are_escaped_in_every_log_line(failing_server):
    forged = "%0d%0a" + FORGED.replace(" ", "%20")
    for path in (f"/x{forged}", "/y%00z%1b[31m", f"/fail/a{forged}"):
        httpx.get(failing_server.base + path, timeout=10)
    # a client that leaves mid-body: the disconnect message names the raw path too
    with socket.create_connection(("127.0.0.1", failing_server.port), timeout=5) as s:
        s.sendall(f"POST /read/d{forged} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc".encode())
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "client disconnected" not in failing_server.log():
        time.sleep(0.1)
    log = failing_server.log()
    assert "unhandled error on GET /fail/a\\r\\n2026" in log, log[-3000:]
    assert "client disconnected during POST /read/d\\r\\n2026" in log, log[-3000:]
    assert '"GET /x\\r\\n2026-01-01' in log and '"GET /y\\x00z\\x1b[31m"' in log, log[-3000:]
    assert_one_line_per_request(log)


@pytest.mark.parametrize(
    "text,line",
    [
        ("/plain/ü", "/plain/ü"),
        ("/a\r\nb", "/a\\r\\nb"),
        ("/\x00\x1b\x7f\t", "/\\x00\\x1b\\x7f\\t"),
        ("/\u2028\x85", "/\\u2028\\x85"),
        ("/a\\r", "/a\\\\r"),  # a literal backslash cannot pass for an escape
    ],
)
def test_log_text_is_one_unambiguous_line(text, line):
    assert log_text(text) == line
    assert log_text("x" * 500) == "x" * 200
