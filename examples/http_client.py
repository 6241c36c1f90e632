"""Call the mrope HTTP service: positions from a JSON body, and from uploaded image and video files.

Run: ``python examples/http_client.py [--url http://127.0.0.1:8000]``

Without ``--url`` the script starts the service itself (``python -m mrope serve``) on a free loopback
port, waits for ``GET /healthz``, and stops it at the end. Only the standard library is used on the
client side (``urllib``), so the same requests work from any language. Each answer is checked against
:func:`mrope.build_positions` run locally: the service is the library over HTTP.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import av
import numpy as np
from PIL import Image

import mrope
from mrope.media import load_image, load_video

MODEL = "qwen2.5-vl"


# ----------------------------------------------------------------------------------------- HTTP


def request(url: str, body: bytes | None = None, content_type: str | None = None) -> Any:
    """GET (no body) or POST ``body``; the decoded JSON answer, or SystemExit with the service's error."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(
        url, data=body, headers=headers, method="POST" if body is not None else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # the service answers {"error": {"code", "message", ...}}
        raise SystemExit(f"{url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None


def multipart(fields: dict[str, str], files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body: text ``fields`` and ``files`` (each sent as a ``files`` part)."""
    boundary = uuid.uuid4().hex
    out = io.BytesIO()
    for name, value in fields.items():
        out.write(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    for filename, data in files:
        out.write(
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
        )
        out.write(data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_service() -> Iterator[str]:
    """``python -m mrope serve`` on a free loopback port, until the block ends."""
    port = free_port()
    cmd = [sys.executable, "-m", "mrope", "serve", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the service exited with code {proc.returncode} before answering")
            try:
                request(url + "/healthz")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise SystemExit("the service did not answer /healthz within 60 s") from None
                time.sleep(0.2)
        print(f"started the service at {url} (pid {proc.pid})")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print("stopped the service")


# ---------------------------------------------------------------------------------------- media


def image_bytes(width: int, height: int) -> bytes:
    rgb = np.zeros((height, width, 3), dtype=np.uint8)
    rgb[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)[None, :]
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, "PNG")
    return buf.getvalue()


def video_bytes(frames: int = 24, fps: int = 12, width: int = 96, height: int = 64) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(frames):
            rgb = np.full((height, width, 3), 10 * k % 256, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------- calls


def check(name: str, answer: dict[str, Any], expected: mrope.Positions) -> None:
    same = answer["positions"] == expected.ids.tolist() and answer["delta"] == expected.delta
    kinds = ", ".join(f"{s['kind']}[{s['start']}:{s['stop']}]" for s in answer["spans"])
    print(f"{name}: {answer['num_tokens']} tokens, delta {answer['delta']}; spans {kinds}")
    if not same:
        raise SystemExit(f"{name}: the service's positions differ from mrope.build_positions")
    print(f"{name}: service == library")


def call_json(url: str) -> None:
    body = {
        "model": MODEL,
        "segments": [
            {"type": "text", "tokens": 12},
            {"type": "image", "grid": [1, 28, 28]},
            {"type": "image", "height": 480, "width": 640},
            {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
            {"type": "text", "ids": [151644, 77091, 198]},
        ],
    }
    answer = request(url + "/v1/positions", json.dumps(body).encode(), "application/json")
    cat = load_image(image_bytes(640, 480), model=MODEL)
    expected = mrope.build_positions(
        [
            mrope.Text(12),
            mrope.Image(grid=(1, 28, 28)),
            cat,
            mrope.Video(grid=(8, 28, 28), fps=2.0),
            mrope.Text([151644, 77091, 198]),
        ],
        model=MODEL,
    )
    check("POST /v1/positions", answer, expected)


def call_upload(url: str) -> None:
    image, video = image_bytes(448, 336), video_bytes()
    layout = [
        {"type": "text", "tokens": 5},
        {"type": "file", "index": 0},
        {"type": "text", "tokens": 3},
        {"type": "file", "index": 1, "fps": 2.0},
    ]
    body, content_type = multipart(
        {"model": MODEL, "layout": json.dumps(layout)}, [("photo.png", image), ("clip.mp4", video)]
    )
    answer = request(url + "/v1/positions/upload", body, content_type)
    for f in answer["files"]:
        print(
            f"  file {f['index']} {f['filename']}: {f['kind']} {f['width']}x{f['height']} -> grid {f['grid']}"
        )
    expected = mrope.build_positions(
        [
            mrope.Text(5),
            load_image(image, model=MODEL),
            mrope.Text(3),
            load_video(video, model=MODEL, fps=2.0),
        ],
        model=MODEL,
    )
    check("POST /v1/positions/upload", answer, expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running service, e.g. http://127.0.0.1:8000 (default: start one)")
    args = parser.parse_args(argv)
    if args.url:
        url = args.url.rstrip("/")
        print(f"service {url}: {request(url + '/healthz')}")
        call_json(url)
        call_upload(url)
        return 0
    with local_service() as url:
        call_json(url)
        call_upload(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
