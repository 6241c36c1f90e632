"""Connections to a real server process: what happens to a connection after an error (a 500, a
refusal before the body was read), bounded request heads, and ``/healthz`` when every connection is
taken.

One server like ``mrope serve`` (:func:`service_proc.serve`) with a small connection limit, and one
serving :mod:`support.failing_app` (the ``failing_server`` fixture). Every socket has a timeout; every
loop is bounded.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from support.service_proc import read_until_closed, rss_mib, serve

pytestmark = pytest.mark.timeout(240)

MAX_CONNECTIONS = 12


@pytest.fixture(scope="module")
def server():
    with serve(env={"MROPE_MAX_CONNECTIONS": str(MAX_CONNECTIONS)}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base, timeout=30) as c:
        yield c


def error_of(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text[:2000]
    return resp.json()["error"]


# ---------------------------------------------------------------------------- keep-alive after an error


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


EARLY = {
    413: b"Content-Type: application/json\r\nContent-Length: 1000000000000\r\n",
    415: b"Content-Type: text/plain\r\nContent-Length: 100\r\n",
    406: b"Content-Type: application/json\r\nAccept: text/html\r\nContent-Length: 100\r\n",
}


@pytest.mark.parametrize("status", sorted(EARLY))
def test_early_answers_close_the_connection(server, client, status):
    """413 by Content-Length, 415 and 406 come before the body is read: they say ``Connection: close``
    and the server really closes the socket, though the client has sent none of the body it announced
    (before, the connection stayed open for the client to trickle it)."""
    head = b"POST /v1/positions HTTP/1.1\r\nHost: x\r\n" + EARLY[status] + b"\r\n"
    start = time.monotonic()
    got, closed = exchange(server.port, head, 2, timeout_s=5)
    answers = split_responses(got)
    assert [a[0] for a in answers] == [status], got[:2000]
    assert answers[0][1].get("connection") == "close", answers[0][1]
    assert json.loads(answers[0][2])["error"]["code"]  # the JSON error shape
    assert closed and time.monotonic() - start < 2.0
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not HTTP\r\n\r\n",  # a TLS hello to the plain port
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",  # a header line without a colon
        b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
    ],
    ids=["tls", "no-colon", "two-lengths"],
)
def test_bytes_that_are_not_http_get_the_json_error_shape(server, client, raw):
    """uvicorn's parser refuses these with a plain-text 400; the service answers the same 400 as JSON
    (``error.code``, ``error.message``), says ``Connection: close`` and closes."""
    got, closed = exchange(server.port, raw, 2, timeout_s=5)
    answers = split_responses(got)
    assert [a[0] for a in answers] == [400], got[:2000]
    status, headers, body = answers[0]
    assert headers.get("content-type") == "application/json" and headers.get("connection") == "close"
    error = json.loads(body)["error"]
    assert error["code"] == "bad_request" and "not valid HTTP" in error["message"]
    assert closed
    assert client.get("/healthz").status_code == 200


# ---------------------------------------------------------------------------------------- header bounds


def send_head(port: int, chunks, timeout_s: float = 20.0) -> bytes:
    """Send the chunks of a request head while reading what the server answers; stop when it has
    answered and closed, or when all chunks are sent and it answers nothing more."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.setblocking(False)
        deadline = time.monotonic() + timeout_s
        for chunk in chunks:
            view = memoryview(chunk)
            while view and time.monotonic() < deadline:
                try:
                    view = view[s.send(view) :]
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    return got + read_until_closed(s, 0.5)
                try:
                    data = s.recv(65536)
                    if not data:
                        return got
                    got += data
                except BlockingIOError:
                    time.sleep(0.001)
                except ConnectionResetError:
                    return got
        return got + read_until_closed(s, 2.0)


def many_lines(n: int, per_chunk: int = 8192):
    yield b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    line = b"a: b\r\n"
    for _ in range(0, n, per_chunk):
        yield line * per_chunk
    yield b"\r\n"


def one_long_header(size: int, chunk: int = 1 << 20):
    yield b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    for _ in range(size // chunk):
        yield b"v" * chunk
    yield b"\r\n\r\n"


@pytest.mark.parametrize(
    "head,code",
    [
        (lambda: many_lines(1_400_000), "too_many_headers"),
        (
            lambda: [b"GET /healthz HTTP/1.1\r\n" + (b"a: " + b"b" * 900 + b"\r\n") * 100 + b"\r\n"],
            "headers_too_large",
        ),
        (lambda: one_long_header(64 << 20), "headers_too_large"),
        (lambda: [b"GET /healthz HTTP/1.1\r\n" + b"a: b\r\n" * 200 + b"\r\n"], "too_many_headers"),
        (
            lambda: [b"GET /healthz?" + b"q" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n"],
            "headers_too_large",
        ),
    ],
    ids=["1.4M-lines", "100x900B-lines", "64MiB-header", "200-headers", "1MiB-url"],
)
def test_headers_are_bounded(server, head, code):
    before = rss_mib(server.pid)
    got = send_head(server.port, head())
    assert got.startswith(b"HTTP/1.1 431 "), got[:300]
    assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["code"] == code
    assert b"connection: close" in got.lower()
    assert rss_mib(server.pid) < before + 30
    assert httpx.get(server.base + "/healthz", timeout=5).status_code == 200


def test_headers_under_the_bounds_are_read(client):
    """The negative control: 100 header lines of 600 bytes (60 KB, under both bounds) get their 200."""
    headers = {f"x-h{i}": "v" * 600 for i in range(100)}
    assert client.get("/healthz", headers=headers).status_code == 200


# ----------------------------------------------------------------- liveness with every connection taken


def test_healthz_is_answered_when_connections_are_full(server):
    """With MROPE_MAX_CONNECTIONS idle connections open, /healthz is still answered (one request per
    reserve connection); any other request past the limit is a 503 that names the cap."""
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)
        resp = httpx.get(server.base + "/healthz", timeout=5)
        assert resp.status_code == 200 and resp.json()["status"] == "ok", resp.text
        assert resp.headers.get("connection") == "close"
        resp = httpx.post(
            server.base + "/v1/positions", json={"model": "qwen2-vl", "segments": []}, timeout=5
        )
        assert error_of(resp, 503)["cap"] == "MROPE_MAX_CONNECTIONS"
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)
    resp = httpx.post(
        server.base + "/v1/positions",
        json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 2}]},
        timeout=5,
    )
    assert resp.status_code == 200, resp.text
