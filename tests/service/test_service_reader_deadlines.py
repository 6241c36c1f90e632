"""Media readers against hostile allowlisted hosts and slow files, on a real server process: every read
stops at the request's deadline and frees its media slot within a second of it.

One server like ``mrope serve`` for the module, with one media slot, a short media timeout, and a URL
allowlist of one loopback HTTP server written here (:class:`Host`): it serves PNGs in ranges, trickles
one byte a second, or answers any range with 48 MiB. Each check sends a valid upload right after the
hostile request (with one slot, it is served only when the slot was freed) and probes ``/healthz``
meanwhile. Every socket has a timeout; every loop is bounded.
"""

from __future__ import annotations

import base64
import io
import re
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from PIL import Image as PILImage
from support.service_proc import one_slot_server, open_fds, rss_mib

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_service_attack  # noqa: E402  (its Matroska of tiny packets)

pytestmark = pytest.mark.timeout(240)

MEDIA_TIMEOUT_S = 1.5
SLOT_FREED_S = 1.0
"""The issue's bound: a reader frees its slot within this long after the deadline."""
HUGE = 48 << 20
CLAIMED_SIZE = 1 << 30


def png(size: int = 56, colour: tuple[int, int, int] = (10, 20, 30)) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (size, size), colour).save(buf, format="PNG")
    return buf.getvalue()


class Host(BaseHTTPRequestHandler):
    """``/ok/<size>.png``: a PNG in ranges (RFC 9110 206 answers); ``/trickle.png``: a 206 whose body
    comes one byte a second; ``/huge.png``: 48 MiB for any range, claiming a 1 GiB file. What each
    hostile answer managed to send, and when its client hung up, lands in ``Host.seen``."""

    protocol_version = "HTTP/1.1"
    seen: dict[str, list[tuple[int, float]]] = {"trickle": [], "huge": []}

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _range(self, size: int) -> tuple[int, int]:
        match = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match is None:
            return 0, size - 1
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) else size - 1
        return start, min(end, size - 1)

    def _head(self, start: int, end: int, size: int, length: int) -> None:
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/ok/"):
            data = png(int(self.path[4:].split(".")[0]))
            start, end = self._range(len(data))
            self._head(start, end, len(data), end - start + 1)
            self.wfile.write(data[start : end + 1])
            return
        if self.path == "/trickle.png":
            data = png()
            self._head(0, len(data) - 1, len(data), len(data))
            self._send("trickle", [data[i : i + 1] for i in range(len(data))], every_s=1.0)
            return
        if self.path == "/huge.png":
            start, _ = self._range(CLAIMED_SIZE)
            self._head(start, start + HUGE - 1, CLAIMED_SIZE, HUGE)
            body = png() if start == 0 else b""
            chunks = [body + bytes((1 << 20) - len(body))] + [bytes(1 << 20)] * (HUGE // (1 << 20) - 1)
            self._send("huge", chunks, every_s=0.0)
            return
        self.send_error(404)

    def _send(self, kind: str, chunks: list[bytes], every_s: float) -> None:
        """``chunks`` written ``every_s`` apart until the client hangs up (seen at once: its FIN makes
        the socket readable with nothing to read)."""
        sent = 0
        try:
            for chunk in chunks[: 120 if every_s else None]:
                self.wfile.write(chunk)
                self.wfile.flush()
                sent += len(chunk)
                if every_s and self._hung_up(every_s):
                    break
        except OSError:  # the client hung up
            pass
        Host.seen[kind].append((sent, time.monotonic()))
        self.close_connection = True

    def _hung_up(self, wait_s: float) -> bool:
        readable, _, _ = select.select([self.connection], [], [], wait_s)
        return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""


@pytest.fixture(scope="module")
def host():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Host)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(host, tokenizer_file):
    with one_slot_server(tokenizer_file, host, MEDIA_TIMEOUT_S) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base, timeout=30) as c:
        yield c


class Health:
    """``/healthz`` probed every 50 ms in a thread while a check runs: the longest answer time."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.worst = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=10) as c:
            while not self.stop.is_set():
                start = time.monotonic()
                assert c.get("/healthz").status_code == 200
                self.worst = max(self.worst, time.monotonic() - start)
                self.stop.wait(0.05)

    def __enter__(self) -> Health:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=15)


def positions(client, segments, model="qwen2-vl") -> httpx.Response:
    return client.post("/v1/positions", json={"model": model, "segments": segments})


def upload_served(client) -> None:
    """A valid upload gets a media slot at once (the only one: nothing hostile holds it)."""
    start = time.monotonic()
    resp = client.post(
        "/v1/positions/upload", data={"model": "qwen2-vl"}, files=[("files", ("ok.png", png(), "image/png"))]
    )
    assert resp.status_code == 200, resp.text
    assert time.monotonic() - start < 1.0


def check_timed_out(client, server, send) -> float:
    """``send()`` answered 422 ``media_timeout`` at the deadline, the slot free within a second of it,
    ``/healthz`` fast throughout and RSS within 50 MiB; returns when the answer came."""
    rss = rss_mib(server.pid)
    with Health(server.base) as health:
        start = time.monotonic()
        resp = send()
        answered = time.monotonic()
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["code"] == "media_timeout", resp.text
        assert MEDIA_TIMEOUT_S - 0.2 < answered - start < MEDIA_TIMEOUT_S + 1.0
        time.sleep(SLOT_FREED_S)
        upload_served(client)
    assert health.worst < 0.5, health.worst
    assert rss_mib(server.pid) - rss < 50
    return answered


def test_a_trickling_host_is_dropped_at_the_deadline(client, server, host):
    """A 206 whose body comes one byte a second: 422 at the deadline, and the host sees the reader hang
    up within a second of it (before, the reading thread held the only slot for the whole trickle)."""
    before = len(Host.seen["trickle"])
    answered = check_timed_out(
        client, server, lambda: positions(client, [{"type": "image", "path": f"http://{host}/trickle.png"}])
    )
    deadline = time.monotonic() + 5
    while len(Host.seen["trickle"]) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    (sent, hung_up), *_ = Host.seen["trickle"][before:]
    assert sent < 10
    assert hung_up - answered < SLOT_FREED_S


def test_a_range_answer_larger_than_asked_is_cut(client, server, host):
    """Any range answered with 48 MiB (a 1 GiB file claimed): the reader takes one block per read and
    hangs up, so the request is answered at once from the PNG header at the start and the host
    manages to send a small part of the 48 MiB (fsspec read each answer whole)."""
    before = len(Host.seen["huge"])
    rss = rss_mib(server.pid)
    with Health(server.base) as health:
        start = time.monotonic()
        resp = positions(client, [{"type": "image", "path": f"http://{host}/huge.png"}])
        assert time.monotonic() - start < MEDIA_TIMEOUT_S
        assert resp.status_code == 200, resp.text
        # the 56x56 PNG at the start of the first block: qwen2-vl's 4x4 patches
        assert (
            resp.json()["positions"]
            == positions(client, [{"type": "image", "grid": [1, 4, 4]}]).json()["positions"]
        )
        upload_served(client)
    assert health.worst < 0.5, health.worst
    assert rss_mib(server.pid) - rss < 50
    deadline = time.monotonic() + 5
    while len(Host.seen["huge"]) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = [s for s, _ in Host.seen["huge"][before:]]
    assert sent and max(sent) < HUGE // 4, sent


def test_a_refused_url_waits_for_no_slot(client, server, host):
    """While a trickling host holds the only slot, a URL of another host is refused at once (before,
    it waited for the slot, then timed out)."""
    hold = threading.Thread(
        target=positions,
        args=(client, [{"type": "image", "path": f"http://{host}/trickle.png"}]),
        daemon=True,
    )
    hold.start()
    time.sleep(0.3)
    with httpx.Client(base_url=server.base, timeout=30) as other:
        start = time.monotonic()
        resp = positions(other, [{"type": "image", "path": "http://127.0.0.2:9/cat.png"}])
        assert time.monotonic() - start < 0.5
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == "media_not_allowed"
    hold.join(timeout=10)
    time.sleep(SLOT_FREED_S)
    upload_served(client)


def test_frames_given_as_allowlisted_urls_are_read(client, host):
    """Two 56x56 frames by URL are read like paths: qwen2-vl makes one temporal patch of 4x4 patches,
    the positions of a video given by its grid [1, 4, 4] (before: 'a URL, which is not read here')."""
    inline = "data:image/png;base64," + base64.b64encode(png()).decode()
    frames = [f"http://{host}/ok/56.png", inline]
    resp = positions(client, [{"type": "video", "frames": frames}])
    assert resp.status_code == 200, resp.text
    expected = positions(client, [{"type": "video", "grid": [1, 4, 4]}])
    assert expected.status_code == 200, expected.text
    assert resp.json()["positions"] == expected.json()["positions"]
    # negative control: frames of two sizes cannot stack
    resp = positions(
        client, [{"type": "video", "frames": [f"http://{host}/ok/56.png", f"http://{host}/ok/112.png"]}]
    )
    assert resp.status_code == 422, resp.text


def test_many_frame_urls_hold_one_connection_at_a_time(client, server, host):
    """60 frame URLs are read one connection at a time: the server's threads and open files during the
    request stay near where they were (a connection and a timer thread per frame would add 60 each). 60,
    not more: the server's media deadline (1.5 s here) covers all of them, about 7 ms a frame on a loaded
    2-core machine."""
    frames = [f"http://{host}/ok/56.png"] * 60
    before = threads_and_fds(server.pid)
    peak = [0, 0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            now = threads_and_fds(server.pid)
            peak[:] = [max(a, b) for a, b in zip(peak, now, strict=True)]
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    resp = positions(client, [{"type": "video", "frames": frames}])
    done.set()
    watcher.join(timeout=5)
    assert resp.status_code == 200, resp.text
    assert (
        resp.json()["positions"]
        == positions(client, [{"type": "video", "grid": [30, 4, 4]}]).json()["positions"]
    )
    assert peak[0] - before[0] < 20 and peak[1] - before[1] < 20, (before, peak)


def threads_and_fds(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as fh:
        threads = next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))
    return threads, open_fds(pid)


def test_frames_from_a_trickling_host_stop_at_the_deadline(client, server, host):
    frames = [f"http://{host}/ok/56.png", f"http://{host}/trickle.png"]
    check_timed_out(client, server, lambda: positions(client, [{"type": "video", "frames": frames}]))


@pytest.fixture(scope="module")
def many_packets_mkv() -> bytes:
    """Matroska audio of a million 2-byte PCM packets (8 MB): the track has no duration of its own, so
    the probe demuxes every packet (several seconds, under the 16 M packet bound of the default caps)."""
    return bench_service_attack.tiny_packets_mkv(1_000_000)


def test_the_audio_probe_stops_at_the_deadline(client, server, many_packets_mkv):
    """An uploaded audio track of a million tiny packets: 422 at the deadline and the slot free within a
    second (before, the probe went on counting packets with the slot held)."""

    def send() -> httpx.Response:
        return client.post(
            "/v1/positions/upload",
            data={"model": "qwen2.5-omni"},
            files=[("files", ("tiny.mkv", many_packets_mkv, "audio/x-matroska"))],
        )

    check_timed_out(client, server, send)
