"""Media where pipelines keep it: fsspec URLs (memory://, http:// on 127.0.0.1) and data: URIs.

Expected values are the same files read from local paths (a local read is the reference: the URL path
only changes where the bytes come from). The HTTP server is ``http.server`` with Range support, counting
the bytes it sends, so a test can see that a header read fetches ranges, not the file. The service
refuses every URL and local path unless a host is on its allowlist, and refuses redirects.
"""

from __future__ import annotations

import base64
import re
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fastapi.testclient import TestClient
from support import media

import mrope
from mrope import MediaError
from mrope.media import load_audio, load_image, load_video, probe_audio, probe_video
from mrope.pipeline import record_positions
from mrope.schema import MEDIA_NONE, MediaAccess
from mrope.service import Settings
from mrope.service.app import create_app

pytestmark = pytest.mark.timeout(120)
MODEL = "qwen2.5-vl"


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with single-range GET support; counts the body bytes sent per path."""

    sent: dict[str, int] = {}
    redirects: dict[str, str] = {}

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        target = self.redirects.get(self.path)
        if target is not None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
            stop = min(int(match.group(2)) + 1 if match.group(2) else len(data), len(data))
            body = data[start:stop]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.sent[self.path] = self.sent.get(self.path, 0) + len(body)  # counted before the client has it
        self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("url_media")
    big = root / "big.jpg"
    big.write_bytes(media.image_bytes(640, 480, "JPEG") + bytes(3 << 20))  # 3 MiB after the image's end
    return {
        "root": root,
        "image": media.write_image(root / "cat.png", 448, 336),
        "big": big,
        "video": media.write_video(root / "clip.mp4", num_frames=24, fps=12),
        "audio": media.write_audio(root / "tone.wav", seconds=0.5),
    }


@pytest.fixture(scope="module")
def server(files) -> Iterator[str]:
    handler = partial(RangeHandler, directory=str(files["root"]))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture()
def memory(files) -> Iterator[str]:
    fs = fsspec.filesystem("memory")
    root = f"/bucket-{uuid.uuid4().hex[:8]}"
    for key in ("image", "video", "audio"):
        fs.pipe(f"{root}/{files[key].name}", files[key].read_bytes())
    try:
        yield f"memory://{root}"
    finally:
        fs.rm(root, recursive=True)


def test_memory_urls_equal_local_files(files, memory) -> None:
    assert load_image(f"{memory}/cat.png", model=MODEL) == load_image(files["image"], model=MODEL)
    assert probe_video(f"{memory}/clip.mp4") == probe_video(files["video"])
    assert load_video(f"{memory}/clip.mp4", model=MODEL, fps=2.0) == load_video(
        files["video"], model=MODEL, fps=2.0
    )
    with pytest.raises(MediaError, match="no such file: 'memory://"):
        load_image(f"{memory}/missing.png", model=MODEL)


def test_audio_urls_equal_local_files(files, memory, server) -> None:
    local = load_audio(files["audio"], model="qwen2.5-omni")
    assert load_audio(f"{memory}/tone.wav", model="qwen2.5-omni") == local
    assert probe_audio(f"http://{server}/tone.wav") == probe_audio(files["audio"])
    data = "data:audio/wav;base64," + base64.b64encode(files["audio"].read_bytes()).decode()
    assert load_audio(data, model="qwen2.5-omni") == local


def test_file_and_data_uris(files) -> None:
    local = load_image(files["image"], model=MODEL)
    assert load_image(files["image"].as_uri(), model=MODEL) == local
    data = "data:image/png;base64," + base64.b64encode(files["image"].read_bytes()).decode()
    assert load_image(data, model=MODEL) == local
    with pytest.raises(MediaError, match="invalid base64"):
        load_image("data:image/png;base64,@@@", model=MODEL)
    with pytest.raises(MediaError, match="not a data: URI"):
        load_image("data:nothing", model=MODEL)


def test_http_reads_ranges_not_whole_files(files, server) -> None:
    RangeHandler.sent.clear()
    size = files["big"].stat().st_size
    assert load_image(f"http://{server}/big.jpg", model=MODEL) == load_image(files["big"], model=MODEL)
    assert 0 < RangeHandler.sent["/big.jpg"] <= size // 4  # a header read: one block, not 3 MiB
    url = f"http://{server}/clip.mp4"
    assert load_video(url, model=MODEL, nframes=4) == load_video(files["video"], model=MODEL, nframes=4)
    with pytest.raises(MediaError, match="no such file"):
        probe_video(f"http://{server}/missing.mp4")


def test_allowlisted_range_reads_equal_the_file(files, server) -> None:
    """An allowlisted host's file read in blocks of 1000 bytes (the last one short): every seek and read
    gives the local file's bytes; each range request takes at most one block; a read past the
    deadline stops with ProbeDeadlineError, naming no other place."""
    from mrope.media import open_url
    from mrope.media._deadline import ProbeDeadlineError

    data = files["image"].read_bytes()
    url = f"http://{server}/cat.png"
    RangeHandler.sent.pop("/cat.png", None)
    with open_url(url, hosts={server}, block_size=1000) as f:
        assert f.seek(0, 2) == len(data)
        rng = np.random.default_rng(0)
        for start in [0, 999, 1000, len(data) - 1, *rng.integers(0, len(data), 20).tolist()]:
            n = int(rng.integers(1, 5000))
            f.seek(start)
            assert f.read(n) == data[start : start + n]
        f.seek(0)
        assert f.read() == data
    assert RangeHandler.sent["/cat.png"] <= 2 * len(data) + 25 * 5000  # block by block, never whole again
    with pytest.raises(ProbeDeadlineError, match="deadline"):
        open_url(url, hosts={server}, deadline=time.monotonic() - 1.0)
    with pytest.raises(MediaError, match="HTTP 404"):
        open_url(f"http://{server}/missing.png", hosts={server})


def test_pipeline_reads_urls(files, memory, server) -> None:
    record = {
        "segments": [
            {"type": "text", "tokens": 3},
            {"type": "image", "path": f"{memory}/cat.png"},
            {"type": "video", "path": f"http://{server}/clip.mp4", "nframes": 4},
        ]
    }
    expected = mrope.build_positions(
        [
            mrope.Text(3),
            load_image(files["image"], model=MODEL),
            load_video(files["video"], model=MODEL, nframes=4),
        ],
        model=MODEL,
    )
    np.testing.assert_array_equal(record_positions(record, model=MODEL).ids, expected.ids)
    # a job over untrusted records says what they may read
    only_http = MediaAccess(urls=True, url_hosts=frozenset({server}))
    with pytest.raises(
        mrope.MRopeError, match=r"segment 1: the host '\(none\)' of 'memory://.* is not in the allowlist"
    ):
        record_positions(record, model=MODEL, media_access=only_http)
    with pytest.raises(mrope.MRopeError, match="segment 1: .* is a URL, which is not read here"):
        record_positions(record, model=MODEL, media_access=MEDIA_NONE)
    # a URL prefix as base_dir: relative paths are read from there
    relative = {"segments": [{"type": "text", "tokens": 3}, {"type": "image", "path": "cat.png"}]}
    got = record_positions(relative, model=MODEL, base_dir=memory)
    np.testing.assert_array_equal(got.ids, expected.ids[:, : got.num_tokens])


def test_service_refuses_urls_and_paths_without_an_allowlist(files, server) -> None:
    client = TestClient(create_app(Settings()))
    for path in (
        f"http://{server}/cat.png",
        str(files["image"]),
        files["image"].as_uri(),
        "data:image/png;base64,AA==",
    ):
        resp = client.post(
            "/v1/positions", json={"model": MODEL, "segments": [{"type": "image", "path": path}]}
        )
        assert resp.status_code == 422, resp.text
        err = resp.json()["error"]
        assert err["code"] == "media_not_allowed" and "not read here" in err["message"]
        for kind in ("video", "audio"):  # every segment that can name a file
            seg = {"type": kind, "path": path}
            resp = client.post("/v1/positions", json={"model": "qwen2.5-omni", "segments": [seg]})
            assert resp.status_code == 422 and resp.json()["error"]["code"] == "media_not_allowed", resp.text


def test_service_reads_allowlisted_hosts_only(files, server) -> None:
    RangeHandler.sent.pop("/cat.png", None)
    host = server
    client = TestClient(create_app(Settings(media_url_hosts=f"example.invalid, {host}")))
    body = {
        "model": MODEL,
        "segments": [
            {"type": "image", "path": f"http://{host}/cat.png"},
            {"type": "video", "path": f"http://{host}/clip.mp4", "nframes": 4},
        ],
    }
    resp = client.post("/v1/positions", json=body)
    assert resp.status_code == 200, resp.text
    expected = mrope.build_positions(
        [load_image(files["image"], model=MODEL), load_video(files["video"], model=MODEL, nframes=4)],
        model=MODEL,
    )
    assert resp.json()["positions"] == expected.ids.tolist()
    # another host (the same server by another name), a local path, a redirect: all refused
    port = host.split(":")[1]
    for path in (f"http://localhost:{port}/cat.png", str(files["image"])):
        resp = client.post(
            "/v1/positions", json={"model": MODEL, "segments": [{"type": "image", "path": path}]}
        )
        assert resp.status_code == 422 and resp.json()["error"]["code"] == "media_not_allowed", resp.text
    RangeHandler.redirects["/elsewhere.png"] = f"http://localhost:{port}/cat.png"
    resp = client.post(
        "/v1/positions",
        json={"model": MODEL, "segments": [{"type": "image", "path": f"http://{host}/elsewhere.png"}]},
    )
    assert resp.status_code == 422, resp.text
    assert "redirect, which is not followed" in resp.json()["error"]["message"]
