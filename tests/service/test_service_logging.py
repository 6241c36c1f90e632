"""Log lines against a real server process: a raw path (line breaks, control characters) is escaped in
every access and error line, so one request is one line and no line can be forged.

The server serves :mod:`support.failing_app` (the ``failing_server`` fixture), whose routes raise and
read like the real ones, so the error log is written too.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from mrope.service._logtext import log_text

pytestmark = pytest.mark.timeout(240)


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
