"""Media a request names or sends, against a real server process: URLs reach no host but the listed
one, local files behind a URL chain give no oracle, an uploaded file is probed once however often it
is placed, and header reads stop at their deadline and free their media slot.

One server like ``mrope serve`` (:func:`service_proc.serve`) for the module, with a media URL allowlist
of one loopback HTTP server (A), one media slot and a short media timeout; a listener on another port
(B) counts every connection that reaches it. Every socket has a timeout; every loop is bounded.
"""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import tempfile
import threading
import time
import zlib
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from PIL import Image as PILImage
from support.media import write_headerless_video
from support.service_proc import one_slot_server

pytestmark = pytest.mark.timeout(240)

MEDIA_TIMEOUT_S = 1.5


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output clean
        pass


class Counter:
    """A TCP listener on a loopback port that counts the connections reaching it (and closes them)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.count += 1
            conn.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=5)
        self.sock.close()


def png(size: int = 56) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (size, size), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    (root / "cat.png").write_bytes(png())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    counter = Counter()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}", counter, root
    finally:
        httpd.shutdown()
        httpd.server_close()
        counter.close()


@pytest.fixture(scope="module")
def server(hosts, tokenizer_file):
    allowed, _, _ = hosts
    with one_slot_server(tokenizer_file, allowed, MEDIA_TIMEOUT_S) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base, timeout=30) as c:
        yield c


def error_of(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text[:2000]
    return resp.json()["error"]


def positions(client, segments, model="qwen2-vl", **extra) -> httpx.Response:
    return client.post("/v1/positions", json={"model": model, "segments": segments, **extra})


# ------------------------------------------------------------------------------------------------ routes


def test_a_route_sizes_media_urls_as_the_library_does(client, hosts):
    """The JSON body's route reaches the URL readers: a rotated photo kept as stored and a rotated MKV read
    by decord (coded frames) under qwen-vl-utils, upright under the default; equal to the library."""
    from support.media import image_bytes, write_video

    import mrope
    from mrope.media import load_image, load_video

    allowed, _, root = hosts
    (root / "portrait.jpg").write_bytes(image_bytes(640, 480, "JPEG", orientation=6))
    write_video(root / "rot.mkv", 16, 8, 96, 64, rotation=90)
    for route in ("qwen-vl-utils", "processor"):
        segments = [
            {"type": "image", "path": f"http://{allowed}/portrait.jpg"},
            {"type": "video", "path": f"http://{allowed}/rot.mkv"},
        ]
        resp = positions(client, segments, model="qwen2.5-vl", route=route)
        assert resp.status_code == 200, resp.text
        media = [load_image(root / "portrait.jpg", model="qwen2.5-vl", route=route)]
        media.append(load_video(root / "rot.mkv", model="qwen2.5-vl", route=route))
        assert resp.json()["positions"] == mrope.build_positions(media, model="qwen2.5-vl").ids.tolist()
        assert resp.json()["image_grid_thw"] == [list(media[0].grid)]
    stored = load_video(root / "rot.mkv", model="qwen2.5-vl", route="qwen-vl-utils").grid
    assert stored != load_video(root / "rot.mkv", model="qwen2.5-vl").grid  # negative control


# ------------------------------------------------------------------------------------------- URL chains


def test_url_chains_and_other_schemes_reach_no_other_host(client, hosts):
    """Only plain http(s) URLs to the listed host are read: chains, other protocols and other hosts are
    refused before anything is opened, so no connection reaches B."""
    allowed, counter, _ = hosts
    b = f"127.0.0.1:{counter.port}"
    attacks = [
        f"simplecache://{allowed}/x::ftp://{b}/f",
        f"zip://{allowed}/x::http://{b}/a.zip",
        f"http://{allowed}/cat.png::http://{b}/a.zip",
        f"blockcache://{allowed}/x::http://{b}/a",
        f"ftp://{allowed}/f",
        f"http://{b}/cat.png",
        f"http://x@{b}/cat.png",
        f"http://{allowed}@{b}/cat.png",
        f"http://{allowed}\\@{b}/cat.png",
        f"https://{b}/cat.png",
    ]
    before = counter.count
    for path in attacks:
        for kind, model in (("image", "qwen2-vl"), ("video", "qwen2-vl"), ("audio", "qwen2.5-omni")):
            resp = positions(client, [{"type": kind, "path": path}], model=model)
            assert 400 <= resp.status_code < 500, (path, resp.text)
    time.sleep(0.3)
    assert counter.count == before, f"{counter.count - before} connection(s) reached {b}"
    # the listed host itself, in any letter case of the scheme
    for url in (f"http://{allowed}/cat.png", f"HTTP://{allowed}/cat.png", f"Http://{allowed}/cat.png"):
        resp = positions(client, [{"type": "image", "path": url}])
        assert resp.status_code == 200, (url, resp.text)


def test_local_files_behind_a_chain_get_one_answer(client, hosts):
    """An existing file, a missing one and a folder behind a chain (or as a file:// URL) get the same
    answer, naming no errno, no exception type and no other host: no file oracle."""
    allowed, _, _ = hosts
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # a short path: messages quote it whole
        secret = os.path.join(tmp, "secret.txt")
        with open(secret, "w") as fh:
            fh.write("not a zip")
        check_one_answer(client, allowed, {"file": secret, "missing": tmp + "/nope", "folder": tmp})


def check_one_answer(client, allowed: str, targets: dict[str, str]) -> None:
    forms = [
        "zip://{a}/x::file://{p}",
        "tar://{a}/x::file://{p}",
        "simplecache://{a}/x::file://{p}",
        "file://{p}",
        "{p}",
        "http://{a}/x::file://{p}",
    ]
    for form in forms:
        answers = {}
        for name, target in targets.items():
            path = form.format(a=allowed, p=target)
            err = error_of(positions(client, [{"type": "image", "path": path}]), 422)
            message = err["message"].replace(repr(path), "<path>").replace(json.dumps(path), "<path>")
            for word in ("Errno", "BadZip", "IsADirectory", "No such", "no such", "directory", "Error:"):
                assert word not in message, (path, message)
            answers[name] = (err["code"], message)
        assert len(set(answers.values())) == 1, answers


# --------------------------------------------------------------------- one probe per file, one deadline


def media_count(client, kind: str) -> float:
    """``mrope_media_seconds_count{kind=...}`` of the server: the files it has probed."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'mrope_media_seconds_count{{kind="{kind}"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture(scope="module")
def long_raw_h264(tmp_path_factory) -> bytes:
    """8000 frames of raw H.264 (no container: probing counts every packet, about 0.25 s here)."""
    path = write_headerless_video(tmp_path_factory.mktemp("h264") / "clip", "h264", num_frames=500, fps=25)
    return path.read_bytes() * 16


def test_one_upload_placed_many_times_is_probed_once(client, long_raw_h264):
    """60 placements of one file at distinct fps: one probe, one deadline, the token cap checked as
    the placements add up (a probe per placement would cost each its own probe time)."""
    before = media_count(client, "video")
    layout = [{"type": "file", "index": 0, "fps": round(0.1 * (k + 1), 1)} for k in range(60)]
    start = time.monotonic()
    resp = client.post(
        "/v1/positions/upload",
        data={"model": "qwen2-vl", "layout": json.dumps(layout)},
        files=[("files", ("clip.h264", long_raw_h264, "application/octet-stream"))],
    )
    took = time.monotonic() - start
    assert resp.status_code in (200, 413), resp.text[:500]
    if resp.status_code == 413:
        assert resp.json()["error"]["cap"] == "MROPE_MAX_TOKENS"
    assert media_count(client, "video") - before == 1
    assert took < 5.0, took
    # the negative control: two files are two probes
    files = [
        ("files", (f"c{i}.h264", long_raw_h264[: 1 << 16], "application/octet-stream")) for i in range(2)
    ]
    resp = client.post("/v1/positions/upload", data={"model": "qwen2-vl"}, files=files)
    assert resp.status_code == 200, resp.text[:500]
    assert media_count(client, "video") - before == 3


# ----------------------------------------------------------------------------- Pillow readers, deadline


def png_with_chunks(n: int, size: int = 10) -> bytes:
    """A ``size`` x ``size`` PNG with ``n`` empty ancillary ``zzZz`` chunks before its pixel data."""
    plain = png(size)
    idat = plain.index(b"IDAT") - 4
    chunk = struct.pack(">I", 0) + b"zzZz" + struct.pack(">I", zlib.crc32(b"zzZz"))
    return plain[:idat] + chunk * n + plain[idat:]


def test_png_chunk_bomb_is_refused_and_frees_its_media_slot(client):
    """A 10x10 PNG behind a million empty chunks (Pillow reads each, about 30 s in all) is a 422 at
    once, and the one media slot is free for the next upload."""
    start = time.monotonic()
    resp = client.post(
        "/v1/positions/upload",
        data={"model": "qwen2-vl"},
        files=[("files", ("bomb.png", png_with_chunks(1_000_000), "image/png"))],
    )
    assert error_of(resp, 422)["code"] in ("invalid_media", "media_timeout"), resp.text
    assert time.monotonic() - start < MEDIA_TIMEOUT_S + 1.0
    resp = client.post(
        "/v1/positions/upload", data={"model": "qwen2-vl"}, files=[("files", ("ok.png", png(), "image/png"))]
    )
    assert resp.status_code == 200, resp.text


def test_pillow_header_reads_stop_at_the_deadline():
    """The library side: a header read past its deadline stops with ProbeDeadlineError, whatever the
    format (the PNG here has chunks under the count bound); without a deadline it is read."""
    from mrope.media import image_size
    from mrope.media._deadline import ProbeDeadlineError

    data = png_with_chunks(2000)
    with pytest.raises(ProbeDeadlineError, match="deadline"):
        image_size(data, deadline=time.monotonic() - 1.0)
    assert image_size(data) == (10, 10)
    assert image_size(data, deadline=time.monotonic() + 60.0) == (10, 10)
