"""A mixed load of valid and hostile requests on one server process (loopback only), issue 34.

Starts the service as ``mrope serve`` runs it (:func:`bench_service.start_server`) with a media URL
allowlist of one loopback host run here (it serves PNGs in ranges, trickles one byte a second, or
answers any range with 48 MiB of a claimed 1 GiB), ``MROPE_MEDIA_THREADS`` media slots and a short
``MROPE_MEDIA_TIMEOUT_S``. For ``--duration`` seconds, ``--valid`` threads send valid requests (a typical
JSON request, a PNG upload, an allowlisted PNG URL) while ``--hostile`` threads (fewer than the media
slots, so a valid request always finds one when hostile readers free theirs at their deadline) cycle
through the hostile ones: a trickling URL, a 48 MiB range answer, frame URLs that trickle, an audio
track of 300,000 tiny packets, a 413 by Content-Length and bytes that are not HTTP on raw sockets, a
state at 2**53, a GLM-Image continued generation state, a URL of a host not on the list, and the
sizes weighed before work (keep runs over a 2**31 grid, one frame time on a 60,000-frame grid, four
GLM-Image generation grids of 1024 x 1024). ``/healthz`` is probed every 50 ms and the server's RSS sampled every 200 ms.

Prints: requests by kind and status, 5xx answers, lost requests (no answer: a transport error or a
client timeout of 60 s), valid requests refused for a media slot (422 ``media_timeout``), the longest
``/healthz`` answer, RSS at the start, its peak and at the end (after the load, once the hostile host
has stopped).

Usage: ``python benchmarks/bench_service_attack.py [--duration 120] [--valid 4] [--hostile 3]
[--media-threads 4] [--media-timeout 2]``.
"""

from __future__ import annotations

import argparse
import collections
import fractions
import io
import itertools
import re
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import av
import httpx
import orjson
from bench_service import JSON_H, rss_kib, start_server
from bench_service_app import TYPICAL
from PIL import Image as PILImage

HUGE = 48 << 20


def png(size: int = 56) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (size, size), (90, 30, 200)).save(buf, format="PNG")
    return buf.getvalue()


PNG = png()


class HostileHost(BaseHTTPRequestHandler):
    """``/ok.png`` in ranges, ``/slow.png`` one byte a second, ``/big.png`` 48 MiB for any range."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        match = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        first = int(match.group(1)) if match else 0
        if self.path == "/big.png":
            self._partial(first, first + HUGE - 1, 1 << 30)
            self._write([PNG[first:] + bytes((1 << 20) - len(PNG[first:]))] + [bytes(1 << 20)] * 47, 0.0)
        elif self.path == "/slow.png":
            self._partial(0, len(PNG) - 1, len(PNG))
            self._write([PNG[i : i + 1] for i in range(len(PNG))][:300], 1.0)
        elif self.path == "/ok.png":
            last = min(int(match.group(2)) if match and match.group(2) else len(PNG) - 1, len(PNG) - 1)
            self._partial(first, last, len(PNG))
            self.wfile.write(PNG[first : last + 1])
        else:
            self.send_error(404)

    def _partial(self, first: int, last: int, size: int) -> None:
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()

    def _write(self, chunks: list[bytes], every_s: float) -> None:
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
                if every_s and select.select([self.connection], [], [], every_s)[0]:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        break  # the reader hung up
        except OSError:
            pass
        self.close_connection = True


def tiny_packets_mkv(n: int = 300_000) -> bytes:
    """Matroska audio of ``n`` 2-byte PCM packets: no per-stream duration, so the probe demuxes them all."""
    buf = io.BytesIO()
    out = av.open(buf, "w", format="matroska")
    stream = out.add_stream("pcm_s16le", rate=16000)
    stream.layout = "mono"
    stream.time_base = fractions.Fraction(1, 1000)
    for i in range(n):
        packet = av.Packet(b"\0\0")
        packet.stream, packet.pts, packet.dts, packet.duration = stream, i, i, 1
        packet.time_base = stream.time_base
        out.mux(packet)
    out.close()
    return buf.getvalue()


def raw_exchange(port: int, data: bytes) -> int:
    """Send ``data`` on a fresh socket; the status of the answer (0: none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    return int(got.split()[1]) if got.startswith(b"HTTP/") else 0


class Tally:
    """Answers by (kind, status), lost requests, valid ones refused for a slot; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[tuple[str, int]] = collections.Counter()
        self.lost: collections.Counter[str] = collections.Counter()
        self.slot_refused = 0

    def record(self, kind: str, send: Callable[[], httpx.Response | int], valid: bool) -> None:
        try:
            resp = send()
        except (httpx.HTTPError, OSError) as exc:
            with self.lock:
                self.lost[f"{kind} ({type(exc).__name__})"] += 1
            return
        status = resp if isinstance(resp, int) else resp.status_code
        refused = valid and not isinstance(resp, int) and status == 422
        refused = refused and resp.json()["error"]["code"] == "media_timeout"  # type: ignore[union-attr]
        with self.lock:
            self.counts[(kind, status)] += 1
            self.slot_refused += refused


def valid_requests(client: httpx.Client, host: str) -> list[tuple[str, Callable[[], httpx.Response]]]:
    url = {"model": "qwen2-vl", "segments": [{"type": "image", "path": f"http://{host}/ok.png"}]}
    return [
        ("valid json", lambda: client.post("/v1/positions", content=orjson.dumps(TYPICAL), headers=JSON_H)),
        (
            "valid upload",
            lambda: client.post(
                "/v1/positions/upload",
                data={"model": "qwen2-vl"},
                files=[("files", ("a.png", PNG, "image/png"))],
            ),
        ),
        ("valid url", lambda: client.post("/v1/positions", json=url)),
    ]


def hostile_requests(
    client: httpx.Client, host: str, port: int, audio: bytes
) -> list[tuple[str, Callable[[], httpx.Response | int]]]:
    def image(path: str) -> Callable[[], httpx.Response]:
        body = {"model": "qwen2-vl", "segments": [{"type": "image", "path": path}]}
        return lambda: client.post("/v1/positions", json=body)

    frames = {
        "model": "qwen2-vl",
        "segments": [{"type": "video", "frames": [f"http://{host}/ok.png", f"http://{host}/slow.png"]}],
    }
    at_limit = {
        "rules": "qwen2-vl", "engine": "mrope", "num_tokens": 2**53 - 10, "next_start": 2**53, "top": 2**53 - 1,
        "images": 0, "rules_digest": "0" * 16,
    }  # fmt: skip
    glm = [{"type": "text", "tokens": 3}, {"type": "image", "grid": [1, 4, 4], "generate": True}]
    big = 2**31 - 1  # the sizes weighed before work (tests/service/test_service_sizes.py)
    keep_runs = {
        "model": "qwen2-vl",
        "segments": [{"type": "image", "grid": [1, big, big], "keep": {"runs": [big] * 466}}],
    }
    frame_times = {
        "model": "qwen3-vl",
        "segments": [{"type": "video", "grid": [60_000, 2, 2], "frame_times": [0.0], "wrap": False}],
    }
    generation = {"model": "glm-image", "input_ids": [[5, 6, 7]], "image_grid_thw": [[1, 1024, 1024]] * 4}

    def continued_glm() -> httpx.Response:
        state = client.post(
            "/v1/positions",
            json={"model": "glm-image", "segments": [{"type": "text", "tokens": 2}], "return_state": True},
        ).json()["state"]
        return client.post(
            "/v1/positions",
            json={"model": "glm-image", "segments": glm, "state": state, "return_state": True},
        )

    def state_at_limit() -> httpx.Response:
        digest = client.post(
            "/v1/positions",
            json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1}], "return_state": True},
        ).json()["state"]
        state = {**at_limit, "engine": digest["engine"], "rules_digest": digest["rules_digest"]}
        return client.post(
            "/v1/positions",
            json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1}], "state": state},
        )

    over = b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n"
    return [
        ("trickling url", image(f"http://{host}/slow.png")),
        ("48 MiB range answer", image(f"http://{host}/big.png")),
        ("trickling frame url", lambda: client.post("/v1/positions", json=frames)),
        (
            "audio of 300k packets",
            lambda: client.post(
                "/v1/positions/upload",
                data={"model": "qwen2.5-omni"},
                files=[("files", ("a.mkv", audio, "audio/x-matroska"))],
            ),
        ),
        ("413 by Content-Length", lambda: raw_exchange(port, over)),
        ("not HTTP", lambda: raw_exchange(port, b"\x16\x03\x01\x02\x00 not http\r\n\r\n")),
        ("state at 2**53", state_at_limit),
        ("GLM-Image continued state", continued_glm),
        ("URL of another host", image("http://127.0.0.2:9/a.png")),
        ("keep runs over a 2**31 grid", lambda: client.post("/v1/positions", json=keep_runs)),
        ("one frame time on a 60,000-frame grid", lambda: client.post("/v1/positions", json=frame_times)),
        ("four GLM-Image generation grids", lambda: client.post("/v1/rope-index", json=generation)),
    ]


def run(args: argparse.Namespace) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), HostileHost)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{httpd.server_address[1]}"
    audio = tiny_packets_mkv()
    settings = {
        "MROPE_MEDIA_URL_HOSTS": host,
        "MROPE_MEDIA_THREADS": str(args.media_threads),
        "MROPE_MEDIA_TIMEOUT_S": str(args.media_timeout),
    }
    proc, base = start_server(1, False, settings=settings)
    port = int(base.rsplit(":", 1)[1])
    tally, stop = Tally(), threading.Event()
    health_worst, rss = [0.0], [rss_kib(proc.pid)]
    start_rss = rss[0]

    def loop(requests: list, valid: bool) -> None:
        for kind, send in itertools.cycle(requests):
            if stop.is_set():
                return
            tally.record(kind, send, valid)

    def health() -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                tally.record("healthz", lambda: c.get("/healthz"), True)
                health_worst[0] = max(health_worst[0], time.perf_counter() - t0)
                stop.wait(0.05)

    def sample() -> None:
        while not stop.is_set():
            rss.append(rss_kib(proc.pid))
            stop.wait(0.2)

    clients = [httpx.Client(base_url=base, timeout=60) for _ in range(args.valid + args.hostile)]
    threads = [threading.Thread(target=health), threading.Thread(target=sample)]
    for k in range(args.valid):
        threads.append(threading.Thread(target=loop, args=(valid_requests(clients[k], host), True)))
    for k in range(args.hostile):
        requests = hostile_requests(clients[args.valid + k], host, port, audio)
        requests = requests[k:] + requests[:k]  # each thread starts elsewhere in the list
        threads.append(threading.Thread(target=loop, args=(requests, False)))
    try:
        for t in threads:
            t.start()
        time.sleep(args.duration)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        for c in clients:
            c.close()
        httpd.shutdown()
        time.sleep(2.0)  # readers abandoned at their deadline have stopped
        end_rss = rss_kib(proc.pid)
        proc.terminate()
        proc.wait(timeout=30)
    report(args, tally, health_worst[0], start_rss, max(rss), end_rss)


def report(args: argparse.Namespace, tally: Tally, worst: float, start: int, peak: int, end: int) -> None:
    print(
        f"## mixed load: {args.duration:g} s, {args.valid} valid + {args.hostile} hostile threads, "
        f"MROPE_MEDIA_THREADS={args.media_threads}, MROPE_MEDIA_TIMEOUT_S={args.media_timeout:g}\n"
    )
    print("| request | status | count |\n|---|---|---|")
    for (kind, status), n in sorted(tally.counts.items()):
        print(f"| {kind} | {status} | {n} |")
    fives = sum(n for (_, status), n in tally.counts.items() if status >= 500)
    lost = sum(tally.lost.values())
    print(f"\n5xx answers: {fives}")
    print(f"lost requests: {lost}" + (f" ({dict(tally.lost)})" if lost else ""))
    print(f"valid requests refused for a media slot (422 media_timeout): {tally.slot_refused}")
    print(f"/healthz longest answer: {worst * 1000:.0f} ms")
    print(f"RSS: start {start / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, end {end / 1024:.0f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    ap.add_argument("--valid", type=int, default=4, help="threads sending valid requests")
    ap.add_argument("--hostile", type=int, default=3, help="threads sending hostile requests")
    ap.add_argument("--media-threads", type=int, default=4, help="MROPE_MEDIA_THREADS of the server")
    ap.add_argument("--media-timeout", type=float, default=2.0, help="MROPE_MEDIA_TIMEOUT_S of the server")
    run(ap.parse_args())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
