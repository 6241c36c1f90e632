"""Denial of service, against a real server process.

One server (:func:`service_proc.serve`, like ``mrope serve``) on a free loopback port with short
deadlines; the SIGTERM and spool tests start their own. Every loop is bounded, every socket has a
timeout. Times are not asserted (benchmarks/bench_service.py measures them); what is asserted is what
must hold whatever the machine: bounded answers, closed connections, memory back near its baseline,
``/healthz`` answering throughout, work counted against its thread budget.
"""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from fractions import Fraction

import av
import httpx
import numpy as np
import pytest
from PIL import Image as PILImage
from PIL import PngImagePlugin
from support.service_proc import open_fds, rss_mib, serve, trickle

import mrope
from mrope.media import load_image, probe_video

pytestmark = pytest.mark.timeout(240)

LIMITS = {
    "MROPE_HEADER_TIMEOUT_S": "1",
    "MROPE_READ_TIMEOUT_S": "1",
    "MROPE_BODY_TIMEOUT_S": "4",
    "MROPE_MAX_CONNECTIONS": "150",
    "MROPE_MEDIA_THREADS": "1",
    "MROPE_MEDIA_TIMEOUT_S": "0.5",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spool")
    with serve(env={**LIMITS, "MROPE_TMP_DIR": str(tmp)}) as srv:
        srv.tmp = tmp  # type: ignore[attr-defined]
        yield srv


def post_json(base: str, path: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        base + path, content=body, headers={"content-type": "application/json", **headers}, timeout=60
    )


def assert_bounded_error(resp: httpx.Response, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text[:2000]
    assert len(resp.content) < 8192, len(resp.content)
    err = resp.json()["error"]
    if code is not None:
        assert err["code"] == code, err
    assert len(err.get("details") or []) <= 20
    assert err["request_id"] == resp.headers["x-request-id"]
    return err


def join(items: str, n: int) -> str:
    return ",".join([items] * n)


# ----------------------------------------------------------------------- 1. validation amplification


def hostile_bodies() -> list[tuple[str, str, bytes, int, str]]:
    """(name, path, body, status, code): each within the 16 MiB body cap."""
    pos, ri = "/v1/positions", "/v1/rope-index"

    def segs(items: str) -> bytes:
        return ('{"model":"qwen2-vl","segments":[' + items + "]}").encode()

    def ids(items: str) -> bytes:
        return segs('{"type":"text","ids":[' + items + "]}")

    rows_of_ones = join("[" + join("1", 1000) + "]", 1000)
    rows_of_fives = join("[" + join("5", 1000) + "]", 1000)
    return [
        ("1M text segments", pos, segs(join('{"type":"text"}', 1_000_000)), 413, "too_many_values"),
        ("5M empty objects", pos, segs(join("{}", 5_000_000)), 413, "too_many_values"),
        ("5000 text segments", pos, segs(join('{"type":"text"}', 5000)), 413, "too_many_segments"),
        ("2M float ids", pos, ids(join("1.5", 2_000_000)), 422, "validation_error"),
        ("2M string ids", pos, ids(join('"x"', 2_000_000)), 422, "validation_error"),
        ("800k out-of-range ids", pos, ids(join(str(2**63), 800_000)), 422, "validation_error"),
        ("4M empty lists", pos, ids(join("[]", 4_000_000)), 413, "too_many_values"),
        ("10k empty lists", pos, ids(join("[]", 10_000)), 422, "list_too_long"),
        (
            "1000 segments of 1000 float ids",
            pos,
            segs(join('{"type":"text","ids":[' + join("1.5", 1000) + "]}", 1000)),
            422,
            "validation_error",
        ),
        (
            "8M input_ids",
            ri,
            ('{"model":"qwen2-vl","input_ids":[[' + join("1", 8_000_000) + "]]}").encode(),
            413,
            "too_many_values",
        ),
        (
            "2M input_ids",
            ri,
            ('{"model":"qwen2-vl","input_ids":[[' + join("1", 2_000_000) + "]]}").encode(),
            413,
            "too_many_tokens",
        ),
        (
            "1000 rows of 1000 bad mask values",
            ri,
            (
                '{"model":"qwen2-vl","input_ids":['
                + rows_of_ones
                + '],"attention_mask":['
                + rows_of_fives
                + "]}"
            ).encode(),
            422,
            "validation_error",
        ),
        ("nested lists", pos, ids("[" * 500 + "]" * 500), 422, "too_deep"),
    ]


def test_validation_amplification_is_bounded(server):
    base = server.base
    normal = b'{"model":"qwen2-vl","segments":[{"type":"text","tokens":5},{"type":"image","grid":[1,4,4]}]}'
    for _ in range(3):
        assert post_json(base, "/v1/positions", normal).status_code == 200
    baseline = rss_mib(server.pid)

    stop = threading.Event()
    health: list[int | str] = []

    def probe() -> None:
        with httpx.Client(base_url=base, timeout=5.0) as c:
            while not stop.is_set():
                try:
                    health.append(c.get("/healthz").status_code)
                except httpx.HTTPError as exc:  # a 5 s stall counts as blocked
                    health.append(type(exc).__name__)
                time.sleep(0.05)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        for name, path, body, status, code in hostile_bodies():
            assert len(body) <= 16 * 1024 * 1024, name
            err = assert_bounded_error(post_json(base, path, body), status, code)
            if code == "validation_error":
                assert err["details"] and len(err["message"]) < 2000, name
        # the same as an upload's layout field (2 MB of empty objects)
        layout = "[" + join("{}", 700_000) + "]"
        up = httpx.post(
            base + "/v1/positions/upload",
            data={"model": "qwen2-vl", "layout": layout},
            files=[("files", ("a.png", png_bytes(32, 32)))],
            timeout=60,
        )
        assert_bounded_error(up, 413, "too_many_values")
        bad_layout = '[{"type":"text","ids":[' + join("1.5", 500_000) + "]}]"
        up = httpx.post(
            base + "/v1/positions/upload",
            data={"model": "qwen2-vl", "layout": bad_layout},
            files=[("files", ("a.png", png_bytes(32, 32)))],
            timeout=60,
        )
        assert_bounded_error(up, 422, "validation_error")
    finally:
        stop.set()
        prober.join(timeout=10)
    assert health and all(h == 200 for h in health), health
    # memory returns near its baseline (the bodies were up to 16 MiB, their parsed forms ~100 MB)
    for _ in range(3):
        assert post_json(base, "/v1/positions", normal).status_code == 200
    assert rss_mib(server.pid) - baseline < 50, (baseline, rss_mib(server.pid))


def reference_counts(text: str) -> tuple[int, int]:
    """Containers and commas outside strings, one character at a time (JSON's string rules)."""
    opens = commas = 0
    inside = escaped = False
    for ch in text:
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        elif ch in "{[":
            opens += 1
        elif ch == ",":
            commas += 1
    return opens, commas


def test_structure_counts_tell_strings_apart(monkeypatch):
    import json
    import random

    from mrope.service import _jsonbody as jsonbody

    rng = random.Random(5)
    pieces = ["a", "{", "[", ",", '"', "\\", "\\\\", '\\"', "x"]
    for _ in range(80):
        obj = {
            f"k{i}": "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
            if rng.random() < 0.7
            else [rng.randint(0, 9) for _ in range(rng.randint(0, 5))]
            for i in range(rng.randint(0, 20))
        }
        text = json.dumps([obj, [obj]])
        for chunk in (1 << 20, 5, 2):  # escapes and strings across chunk boundaries
            monkeypatch.setattr(jsonbody, "_CHUNK", chunk)
            assert jsonbody.structure_counts(text.encode()) == reference_counts(text), (chunk, text)


def test_received_body_is_read_untimed_but_still_counted():
    """A body the protocol has received in full (scope flag) is read without a deadline timer, but its
    bytes still count against the cap (413); without the flag a stalled read is a 408."""
    import anyio

    from mrope.service._errors import ServiceError
    from mrope.service._guards import BODY_RECEIVED, BodyPace, Route, counting_receive

    route = Route(limit=10, cap="MROPE_MAX_BODY_BYTES", body_timeout_s=1.0)
    pace = BodyPace(read_timeout_s=0.05)

    async def full_body() -> dict:
        return {"type": "http.request", "body": b"x" * 11, "more_body": False}

    async def stalled() -> dict:
        await anyio.sleep(5)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def status_of(receive, scope) -> int:
        try:
            await counting_receive(receive, route, pace, scope=scope)()
        except ServiceError as exc:
            return exc.status_code
        return 200

    assert anyio.run(status_of, full_body, {BODY_RECEIVED: True}) == 413
    assert anyio.run(status_of, stalled, {}) == 408


def test_duplicate_keys_and_strict_json(server):
    base = server.base
    dup = b'{"model":"qwen2-vl","segments":[{"type":"text","tokens":1,"tokens":2}]}'
    err = assert_bounded_error(post_json(base, "/v1/positions", dup), 422, "duplicate_key")
    assert "'tokens'" in err["message"]
    # colons inside strings do not trip the duplicate check
    ok = post_json(
        base, "/v1/positions", b'{"model":"qwen2-vl","segments":[{"type":"text","ids":[1,2]}],"rules":null}'
    )
    assert ok.status_code == 200
    err = assert_bounded_error(
        post_json(base, "/v1/positions", b'{"model":"qwen2-vl","model":"qwen3-vl","segments":[]}'),
        422,
        "duplicate_key",
    )
    evil = httpx.post(
        base + "/v1/positions",
        content=b'{"model":"qwen2-vl","segments":[]}',
        headers={"content-type": "application/evil+json"},
        timeout=10,
    )
    assert_bounded_error(evil, 415, "unsupported_media_type")
    empty_row = post_json(base, "/v1/rope-index", b'{"model":"qwen2-vl","input_ids":[[]]}')
    err = assert_bounded_error(empty_row, 422)
    assert "at least one token id" in err["message"] and "dtype" not in err["message"], err


# ------------------------------------------------------------------ 2. read deadlines, connections


def half_headers(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-")
    return s


def half_body(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{"
    )
    return s


def closed_by_server(s: socket.socket, within_s: float) -> tuple[bool, bytes]:
    """Read until EOF (the server closed) or ``within_s`` passes."""
    s.settimeout(0.2)
    got = b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


def test_slow_clients_are_cut_off(server):
    fds_before = open_fds(server.pid)
    socks = [half_headers(server.port) for _ in range(60)] + [half_body(server.port) for _ in range(60)]
    try:
        held = 0
        end = time.monotonic() + 0.8  # inside the 1 s header deadline
        while time.monotonic() < end and held < 100:
            held = max(held, open_fds(server.pid) - fds_before)
            time.sleep(0.02)
        assert held >= 60, held  # the server holds them for now
        results = [closed_by_server(s, 15.0) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert all(closed for closed, _ in results)
    for _, got in results[60:]:  # half bodies: a 408 naming the read deadline, then closed
        assert got.startswith(b"HTTP/1.1 408"), got[:200]
        assert b"MROPE_READ_TIMEOUT_S" in got and b"connection: close" in got.lower()
    deadline = time.monotonic() + 10
    while open_fds(server.pid) > fds_before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert open_fds(server.pid) <= fds_before + 5
    assert httpx.get(server.base + "/healthz", timeout=5).status_code == 200


def test_slow_body_trickle_is_cut_off(server):
    """A body that keeps coming, one byte a second: the whole-body deadline (4 s here) ends it."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        s.sendall(
            b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n"
        )
        got = trickle(s, b" ", tries=40, every_s=0.5, until=b"}")  # at most ~20 s
        assert got.startswith(b"HTTP/1.1 408"), got[:300]
        assert b"MROPE_BODY_TIMEOUT_S" in got or b"MROPE_MIN_UPLOAD_RATE" in got, got
    finally:
        s.close()


def test_connection_limit(server):
    fds_before = open_fds(server.pid)
    socks = []
    try:
        for _ in range(220):
            socks.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        time.sleep(0.3)  # well inside the 1 s header deadline
        held = open_fds(server.pid) - fds_before
        assert held <= 150 + 5, held
        closed = sum(closed_by_server(s, 0.05)[0] for s in socks)
        assert closed >= 220 - 150 - 5, closed
    finally:
        for s in socks:
            s.close()
    assert httpx.get(server.base + "/healthz", timeout=5).status_code == 200


# ------------------------------------------------------------------------------------ 3. SIGTERM


@pytest.mark.parametrize("grace", [2])
def test_sigterm_finishes_within_the_grace_period(grace):
    env = {
        "MROPE_SHUTDOWN_GRACE_S": str(grace),
        "MROPE_HEADER_TIMEOUT_S": "600",
        "MROPE_READ_TIMEOUT_S": "600",
        "MROPE_BODY_TIMEOUT_S": "600",
    }
    with serve(env=env) as srv:
        socks = [half_body(srv.port), half_headers(srv.port)]
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle.recv(4096).startswith(b"HTTP/1.1 200")
        socks.append(idle)
        try:
            time.sleep(0.3)
            start = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            # whatever the clients do, the process is gone soon after the grace period
            srv.proc.wait(timeout=grace + 15)
            elapsed = time.monotonic() - start
        finally:
            for s in socks:
                s.close()
        # uvicorn re-raises the signal once it has shut down
        assert srv.proc.returncode in (0, -signal.SIGTERM), srv.log()
        assert elapsed < grace + 15
        assert "timeout graceful shutdown exceeded" in srv.log()


# ------------------------------------------------------------------------------- 4. media timeouts


def many_packet_mkv(n: int) -> bytes:
    """A Matroska file of ``n`` copies of one 2x2 raw grey frame (25 fps): cheap to write, and its frame
    count is not in the header, so probing must demux every packet."""
    buf = io.BytesIO()
    out = av.open(buf, "w", format="matroska")
    stream = out.add_stream("rawvideo", rate=25)
    stream.width, stream.height, stream.pix_fmt = 2, 2, "gray"
    tb = stream.time_base or Fraction(1, 1000)
    data = bytes(4)
    for i in range(n):
        packet = av.Packet(data)
        packet.stream = stream
        packet.pts = packet.dts = int(Fraction(i, 25) / tb)
        packet.time_base = tb
        packet.is_keyframe = True
        out.mux(packet)
    out.close()
    return buf.getvalue()


def busy_readers(base: str) -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    m = re.search(r"^mrope_media_threads_busy (\S+)$", text, re.M)
    assert m is not None, text[:500]
    return float(m.group(1))


@pytest.mark.timeout(300)
def test_media_timeout_stops_the_work(tmp_path):
    """One media reader (MROPE_MEDIA_THREADS=1) and a timeout a quarter of what probing the slow file
    takes on this machine: the slow file times out, its reader stops at the same deadline (packet
    counting looks at the clock), so the next upload gets the one reader slot. Were the work left
    running (or its slot released while it runs), the PNG would wait for it and time out itself."""
    path = tmp_path / "many.mkv"
    path.write_bytes(many_packet_mkv(300_000))
    start = time.perf_counter()
    probe_video(str(path), max_packets=1_000_000)
    timeout = max(0.25, (time.perf_counter() - start) / 4)
    env = {
        "MROPE_TMP_DIR": str(tmp_path),
        "MROPE_MEDIA_THREADS": "1",
        "MROPE_MEDIA_TIMEOUT_S": f"{timeout:.3f}",
        "MROPE_MAX_VIDEO_FRAMES": "1000000",
        "MROPE_MAX_VIDEO_SECONDS": "100000",
    }
    mkv = path.read_bytes()
    with serve(env=env) as srv:
        seen: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                seen.append(busy_readers(srv.base))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            for _ in range(2):
                slow = httpx.post(
                    srv.base + "/v1/positions/upload",
                    data={"model": "qwen2-vl"},
                    files=[("files", ("many.mkv", mkv))],
                    timeout=60,
                )
                assert_bounded_error(slow, 422, "media_timeout")
                quick = httpx.post(
                    srv.base + "/v1/positions/upload",
                    data={"model": "qwen2-vl"},
                    files=[("files", ("a.png", png_bytes(64, 48)))],
                    timeout=60,
                )
                assert quick.status_code == 200, (timeout, quick.text)
        finally:
            stop.set()
            watcher.join(timeout=10)
        assert seen and max(seen) <= 1
        assert busy_readers(srv.base) == 0


# ----------------------------------------------------------------------------------- 5. stale spool


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_spool_swept_at_start(tmp_path):
    env = {"MROPE_TMP_DIR": str(tmp_path)}
    with serve(env=env) as first:
        s = socket.create_connection(("127.0.0.1", first.port), timeout=10)
        boundary = b"b0undary"
        head = (
            b"--" + boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="v.bin"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n"
        )
        s.sendall(
            b"POST /v1/positions/upload HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=" + boundary + b"\r\n"
            b"Content-Length: 22000000\r\n\r\n" + head + b"\0" * 5_000_000
        )
        deadline = time.monotonic() + 20
        spools: list = []
        while time.monotonic() < deadline:
            spools = [p for p in tmp_path.iterdir() if p.name.startswith("mrope-upload-")]
            if spools and sum(f.stat().st_size for f in spools[0].iterdir()) > 1_000_000:
                break
            time.sleep(0.05)
        assert spools, "the upload folder never appeared"
        first.proc.kill()
        first.proc.wait(timeout=10)
        s.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("mrope-upload-")] == [spools[0].name]
    host = spools[0].name[len("mrope-upload-") :].rsplit("-", 2)[0]
    keep = [
        tmp_path / f"mrope-upload-{host}-{os.getpid()}-live",  # a live process's upload
        tmp_path / f"mrope-upload-otherhost-{dead_pid()}-remote",  # another host's (shared folder)
        tmp_path / "unrelated",
    ]
    for p in keep:
        p.mkdir()
        (p / "f").write_bytes(b"x")
    target = tmp_path / "unrelated"
    link = tmp_path / f"mrope-upload-{host}-{dead_pid()}-link"
    link.symlink_to(target, target_is_directory=True)
    with serve(env=env) as second:
        assert "removed 1 upload folder" in second.log()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert spools[0].name not in names
    assert sorted([*(p.name for p in keep), link.name]) == names
    assert (target / "f").read_bytes() == b"x"


# ------------------------------------------------------------------------------ 6, 7. upload sniffing


def png_bytes(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (width, height), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def test_big_header_images_accepted_and_zip_refused(server, tmp_path):
    rng = np.random.default_rng(3)
    jpg = tmp_path / "icc.jpg"
    PILImage.new("RGB", (640, 480)).save(jpg, icc_profile=rng.bytes(100_000))
    png = tmp_path / "xmp.png"
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", "x" * 100_000)
    PILImage.new("RGB", (300, 200)).save(png, pnginfo=info)
    for path in (jpg, png):
        assert path.stat().st_size > 100_000
        resp = httpx.post(
            server.base + "/v1/positions/upload",
            data={"model": "qwen2-vl"},
            files=[("files", (path.name, path.read_bytes()))],
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        want = mrope.build_positions([load_image(str(path), model="qwen2-vl")], model="qwen2-vl")
        assert resp.json()["positions"] == want.ids.tolist()
        assert resp.json()["files"][0]["kind"] == "image"
    # a zip holding a JPEG is not a one-frame MJPEG video
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("a.jpg", jpg.read_bytes())
    resp = httpx.post(
        server.base + "/v1/positions/upload",
        data={"model": "qwen2-vl"},
        files=[("files", ("a.zip", zbuf.getvalue()))],
        timeout=60,
    )
    err = assert_bounded_error(resp, 422, "invalid_media")
    assert "a.zip" in err["message"], err


def test_video_upload_loads_no_torch(server, tmp_path):
    path = tmp_path / "v.mkv"
    path.write_bytes(many_packet_mkv(40))
    resp = httpx.post(
        server.base + "/v1/positions/upload",
        data={"model": "qwen2-vl"},
        files=[("files", ("v.mkv", path.read_bytes()))],
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["files"][0]["kind"] == "video"
    with open(f"/proc/{server.pid}/maps") as fh:
        maps = fh.read()
    assert "libtorch" not in maps
