"""Positions over HTTP as JSON, npy and a position program (issue 37): requests per second of one server.

Starts the service as ``mrope serve`` runs it (:func:`bench_service.start_server`, one worker, loopback)
and loads ``POST /v1/positions`` with ``wrk`` (one thread, ``--concurrency`` connections) for two
requests, each answered in the three formats the service speaks:

- the typical request (:data:`bench_service_app.TYPICAL`: text, two images and a video as grids, 3,142
  tokens);
- a 100k-token video prompt (Qwen2.5-VL, text, a ``[100, 64, 64]`` video grid: 102,400 vision tokens).

``Accept: application/json`` (the default), ``application/x-npy`` (int32) and
``application/x-mrope-program`` (:class:`mrope.PositionProgram` bytes). Before any load, each answer is
decoded and checked equal to the JSON answer's positions, so the three carry the same ids. ``/healthz``
is the floor. Rounds are interleaved (floor, then each request and format) and the medians printed, with
each format's req/s against JSON's of the same request, per round, and the server process's CPU time
(user + system) per request against JSON's: on a shared machine the CPU a request costs moves less with
other jobs than the rate does.

Usage: ``python benchmarks/bench_service_program.py [--duration 5] [--rounds 3] [--concurrency 8]``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile

import httpx
import numpy as np
import orjson
from bench_service import Result, run_load, start_server
from bench_service_app import TYPICAL

import mrope

VIDEO_100K = {
    "model": "qwen2.5-vl",
    "segments": [
        {"type": "text", "tokens": 64},
        {"type": "video", "grid": [100, 64, 64], "fps": 2.0},
        {"type": "text", "tokens": 32},
    ],
}
"""A long video prompt: 102,400 vision tokens plus 96 text tokens and the two wrappers."""

FORMATS = {
    "JSON": "application/json",
    "npy": "application/x-npy",
    "program": "application/x-mrope-program",
}


def decoded(fmt: str, body: bytes) -> np.ndarray:
    """The positions ``[A, n]`` of one answer's bytes."""
    if fmt == "JSON":
        return np.asarray(orjson.loads(body)["positions"])
    if fmt == "npy":
        return np.load(io.BytesIO(body), allow_pickle=False)
    return mrope.PositionProgram.from_bytes(body).expand()


def check_same(base: str, body: bytes) -> dict[str, int]:
    """Each format's answer decoded equal to JSON's; returns each answer's size in bytes."""
    sizes, ids = {}, {}
    for fmt, accept in FORMATS.items():
        resp = httpx.post(
            base + "/v1/positions",
            content=body,
            headers={"content-type": "application/json", "accept": accept},
            timeout=60,
        )
        resp.raise_for_status()
        sizes[fmt], ids[fmt] = len(resp.content), decoded(fmt, resp.content)
    for fmt in FORMATS:
        if not np.array_equal(ids[fmt], ids["JSON"]):
            raise SystemExit(f"the {fmt} answer's positions differ from JSON's")
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per scenario and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    requests = {
        "typical (3,142 tokens)": orjson.dumps(TYPICAL),
        "video (102,498 tokens)": orjson.dumps(VIDEO_100K),
    }
    load0 = os.getloadavg()[0]
    proc, base = start_server(1, False)
    try:
        sizes = {name: check_same(base, body) for name, body in requests.items()}
        results: dict[tuple[str, str], list[Result]] = {}
        with tempfile.TemporaryDirectory() as workdir:

            def load(name: str, fmt: str | None, seconds: float) -> Result:
                if fmt is None:
                    return run_load(
                        "wrk",
                        proc.pid,
                        base,
                        "floor",
                        "GET",
                        "/healthz",
                        None,
                        {},
                        args.concurrency,
                        seconds,
                        workdir,
                    )
                headers = {"content-type": "application/json", "accept": FORMATS[fmt]}
                return run_load(
                    "wrk", proc.pid, base, f"{name} {fmt}", "POST", "/v1/positions", requests[name], headers,
                    args.concurrency, seconds, workdir,
                )  # fmt: skip

            scenarios = [("/healthz (floor)", None)] + [(n, f) for n in requests for f in FORMATS]
            for name, fmt in scenarios:
                load(name, fmt, 1.0)  # warm-up
            for _ in range(args.rounds):
                for name, fmt in scenarios:
                    results.setdefault((name, fmt or ""), []).append(load(name, fmt, args.duration))
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    print(
        f"\nwrk, 1 thread, {args.concurrency} connections, {args.duration:g} s per scenario, {args.rounds} "
        f"interleaved rounds, one server worker, {os.cpu_count()} CPUs, load average {load0:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at the end\n"
    )
    print(
        "| request | format | body bytes | req/s (median) | p50 ms | / JSON by req/s (per round) "
        "| server CPU us / request (median) | / JSON by CPU (per round) |"
    )
    print("|---|---|---:|---:|---:|---|---:|---|")
    floor = results[("/healthz (floor)", "")]
    floor_cpu = statistics.median(r.cpu_us_per_request for r in floor)
    print(
        f"| `GET /healthz` (floor) | | | {statistics.median(r.rps for r in floor):,.0f} | | "
        f"| {floor_cpu:,.0f} | |"
    )
    for name in requests:
        json_rounds = results[(name, "JSON")]
        for fmt in FORMATS:
            rs = results[(name, fmt)]
            ratios = [r.rps / j.rps for r, j in zip(rs, json_rounds, strict=True) if j.rps]
            cpu = [r.cpu_us_per_request / j.cpu_us_per_request for r, j in zip(rs, json_rounds, strict=True)]
            print(
                f"| {name} | {fmt} | {sizes[name][fmt]:,} | {statistics.median(r.rps for r in rs):,.1f} "
                f"| {statistics.median(r.p50_ms for r in rs):.2f} "
                f"| {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)}) "
                f"| {statistics.median(r.cpu_us_per_request for r in rs):,.0f} "
                f"| {statistics.median(cpu):.2f} ({', '.join(f'{x:.2f}' for x in cpu)}) |"
            )
    errors = sum(r.errors for rs in results.values() for r in rs)
    print(f"\nnon-2xx or socket errors: {errors}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
