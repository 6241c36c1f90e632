"""Load benchmark of the HTTP service on loopback.

Starts ``uvicorn service.app:app`` as a subprocess on a free 127.0.0.1 port, drives it with
``httpx.AsyncClient`` at a fixed concurrency for a bounded time per scenario, stops it, and prints a
markdown table:

- ``/healthz``: the framework's floor (requests per second, p50 / p99 latency).
- ``/v1/positions``, a typical request (text + 2 images + 1 video as JSON grids, about 3k tokens), JSON out;
  its throughput as a fraction of the floor's (target: at least 60 %).
- ``/v1/positions`` with a 128k-token text and ``Accept: application/x-npy``: p50 latency (one at a time).
- 1M tokens, JSON and npy: p50 latency (one at a time), to show that JSON rendering is not the cost.
- the server's resident memory (VmRSS) before and after the load; errors (any non-200) must be zero.

Usage: ``python benchmarks/bench_service.py [--duration 10] [--concurrency 16] [--workers 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]

TYPICAL = {
    "model": "qwen2.5-vl",
    "segments": [
        {"type": "text", "tokens": 48},
        {"type": "image", "grid": [1, 36, 48]},
        {"type": "text", "ids": list(range(100, 132))},
        {"type": "image", "grid": [1, 28, 40]},
        {"type": "text", "tokens": 16},
        {"type": "video", "grid": [8, 32, 36], "fps": 2.0},
        {"type": "text", "tokens": 24},
    ],
}


def text_request(n: int) -> dict:
    return {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": n}]}


@dataclass
class Result:
    name: str
    requests: int
    errors: int
    seconds: float
    latencies: list[float]
    server_cpu_s: float = float("nan")

    @property
    def cpu_us_per_request(self) -> float:
        """Server CPU time (user + system) per request, microseconds: robust to a busy client machine."""
        return self.server_cpu_s / self.requests * 1e6 if self.requests else float("nan")

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def load(
    pid: int,
    client: httpx.AsyncClient,
    name: str,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    max_requests: int | None = None,
) -> Result:
    """``concurrency`` loops sending the same request until ``duration`` seconds pass (or
    ``max_requests`` are sent)."""
    latencies: list[float] = []
    errors = 0
    sent = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal errors, sent
        while time.perf_counter() < deadline and (max_requests is None or sent < max_requests):
            sent += 1
            t0 = time.perf_counter()
            try:
                resp = await client.request(method, path, content=body, headers=headers)
                ok = resp.status_code == 200 and len(resp.content) > 0
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - t0)
            errors += not ok

    start, cpu0 = time.perf_counter(), cpu_seconds(pid)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu0
    return Result(name, len(latencies), errors, elapsed, latencies, cpu)


async def run_all(
    base: str, concurrency: int, duration: float, pid: int
) -> tuple[list[Result], list[tuple[str, int]]]:
    """Every scenario, plus VmRSS snapshots of the server between them."""
    rss = [("started", rss_kib(pid))]
    json_h = {"content-type": "application/json"}
    npy_h = {"content-type": "application/json", "accept": "application/x-npy"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60.0) as client:
        go = functools.partial(load, pid, client)
        typical = orjson.dumps(TYPICAL)
        check = (await client.post("/v1/positions", content=typical, headers=json_h)).json()
        print(f"typical request: {check['num_tokens']} tokens", file=sys.stderr)
        await go("warmup", "GET", "/healthz", None, {}, concurrency, 1.0)
        await go("warmup", "POST", "/v1/positions", typical, json_h, concurrency, 1.0)
        rss.append(("after warm-up", rss_kib(pid)))
        results = [await go("GET /healthz (floor)", "GET", "/healthz", None, {}, concurrency, duration)]
        rss.append(("after /healthz load", rss_kib(pid)))
        name = "POST /v1/positions typical ~3k tokens, JSON"
        results.append(await go(name, "POST", "/v1/positions", typical, json_h, concurrency, duration))
        rss.append(("after typical load", rss_kib(pid)))
        big = orjson.dumps(text_request(128 * 1024))
        name = "POST /v1/positions 128k tokens, npy (c=1)"
        results.append(await go(name, "POST", "/v1/positions", big, npy_h, 1, min(duration, 5.0)))
        huge = orjson.dumps(text_request(1_000_000))
        for label, headers in (("JSON", json_h), ("npy", npy_h)):
            name = f"POST /v1/positions 1M tokens, {label} (c=1)"
            results.append(
                await go(name, "POST", "/v1/positions", huge, headers, 1, min(duration, 5.0), max_requests=20)
            )
        rss.append(("after 128k / 1M requests", rss_kib(pid)))
        name = "POST /v1/positions typical, again"
        results.append(await go(name, "POST", "/v1/positions", typical, json_h, concurrency, duration))
        rss.append(("after typical load again", rss_kib(pid)))
    return results, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per scenario (default 10)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (RSS is the parent's)")
    args = ap.parse_args()

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "service.app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
        "--workers",
        str(args.workers),
    ]
    proc = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited with {proc.returncode}")
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server did not start within 30 s")
            time.sleep(0.05)
        results, rss = asyncio.run(run_all(base, args.concurrency, args.duration, proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    print(
        f"\nconcurrency {args.concurrency}, {args.duration:g} s per load scenario, {args.workers} worker(s), "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n"
    )
    print("| scenario | requests | errors | req/s | p50 ms | p99 ms | server CPU us/req |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.name} | {r.requests} | {r.errors} | {r.rps:,.0f} | {r.pct(0.5):.2f} | {r.pct(0.99):.2f} "
            f"| {r.cpu_us_per_request:,.0f} |"
        )
    floor, typical = results[0], results[1]
    ratio = typical.rps / floor.rps if floor.rps else 0.0
    cpu_ratio = floor.cpu_us_per_request / typical.cpu_us_per_request
    print(
        f"\npositions / floor: {ratio:.0%} of the floor's measured throughput; {cpu_ratio:.0%} by server CPU per"
    )
    print("request (the throughput ratio once the server, not the client, is the bottleneck). Target >= 60%.")
    print("\n| server VmRSS | MiB |\n|---|---:|")
    for label, kib in rss:
        print(f"| {label} | {kib / 1024:.1f} |")
    errors = sum(r.errors for r in results)
    print(f"errors: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
