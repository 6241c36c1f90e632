"""Load benchmark of the HTTP service on loopback.

Starts the service as ``mrope serve`` does (:func:`service.server.run`: httptools, uvloop; access log
off unless ``--access-log``) as a subprocess on a free 127.0.0.1 port, drives it for a bounded time per
scenario, stops it, and prints markdown tables. The load generator is ``wrk`` (Debian package ``wrk``;
a Lua script sends the POST bodies) when it is installed, so the client is not the bottleneck;
``--client httpx`` uses ``httpx.AsyncClient`` instead (client-bound: its ratios are not the server's).

- ``/healthz``: the framework's floor (requests per second, p50 / p99 latency).
- ``/v1/positions``, a typical request (text + 2 images + 1 video as JSON grids, about 3k tokens), JSON out
  and then npy out (``Accept: application/x-npy``); their throughput as a fraction of the floor's (target:
  at least 60 %) and against each other, and the same by server CPU time per request. The three run as
  back-to-back rounds (``--pairs``), the same body every time (no cache answers it: every request is
  parsed, validated, built and rendered).
- ``/v1/positions`` with a 128k-token text and ``Accept: application/x-npy``: p50 latency (one at a time).
- 1M tokens, JSON and npy: p50 latency (one at a time), to show that JSON rendering is not the cost.
- the server's resident memory (VmRSS) before and after the load; errors (any non-200) must be zero.

It also times hostile bodies: each body up to the 16 MiB cap, one at a time, with the
server's resident memory after them.

Usage: ``python benchmarks/bench_service.py [--duration 10] [--concurrency 16] [--workers 1] [--pairs 2]
[--client wrk|httpx] [--access-log] [--stages] [--profile out.txt] [--in-process] [--formats]``.
``--in-process`` only times the app answering ``/healthz`` and the typical request as JSON, npy and npy
int64 in-process. ``--formats`` only runs ``/healthz`` and the typical request as JSON, npy (int32) and npy
int64 (``Accept: application/x-npy; dtype=int64``) on the service, then the same three answers from
``canned`` servers that send those bytes with no work, ``--pairs`` interleaved rounds: what each format
costs in a loaded server, and what its body's transport alone costs. ``--stages`` adds three servers
whose ``/v1/positions`` does only part of the work before answering the typical request's own bytes
(:data:`STAGES`), run in turn with the real one: what each stage costs inside a loaded server, and what
the server, the middlewares and the response cost with no work at all. ``--profile`` runs pyinstrument over the app
answering the typical request in-process and writes its text report. ``--instructions`` instead counts
the instructions of ``/healthz``, the typical request and its stages in-process with valgrind's
callgrind: slow (minutes), but the one figure a loaded shared machine does not move. The in-process
measures and the typical request live in ``bench_service_app.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx
import orjson
from bench_service_app import (
    ROOT,
    TYPICAL,
    count_instructions,
    in_process_formats,
    make_app,
    profile_app,
)

JSON_H = {"content-type": "application/json"}
NPY_H = {"content-type": "application/json", "accept": "application/x-npy"}
NPY64_H = {"content-type": "application/json", "accept": "application/x-npy; dtype=int64"}
FORMATS = (("JSON", "json", JSON_H), ("npy", "npy", NPY_H), ("npy int64", "npy-int64", NPY64_H))
"""The typical request's answers ``--formats`` compares: (label, the service's format name, headers)."""


def text_request(n: int) -> dict:
    return {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": n}]}


def _join(item: str, n: int) -> str:
    return ",".join([item] * n)


def hostile_bodies() -> list[tuple[str, str, bytes]]:
    """Hostile bodies, each within the 16 MiB body cap."""
    seg = '{"model":"qwen2-vl","segments":[%s]}'
    ids = '{"model":"qwen2-vl","segments":[{"type":"text","ids":[%s]}]}'
    return [
        ("1M text segments (16 MB)", "/v1/positions", (seg % _join('{"type":"text"}', 1_000_000)).encode()),
        ("5M empty objects (15 MB)", "/v1/positions", (seg % _join("{}", 5_000_000)).encode()),
        ("2M float ids (8 MB)", "/v1/positions", (ids % _join("1.5", 2_000_000)).encode()),
        ("4M empty lists (12 MB)", "/v1/positions", (ids % _join("[]", 4_000_000)).encode()),
        (
            "8M input_ids (16 MB)",
            "/v1/rope-index",
            ('{"model":"qwen2-vl","input_ids":[[' + _join("1", 8_000_000) + "]]}").encode(),
        ),
        ("1M valid ids (7 MB)", "/v1/positions", (ids % _join("7", 1_000_000)).encode()),
    ]


@dataclass
class Result:
    name: str
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float = float("nan")
    server_sys_s: float = float("nan")

    @property
    def cpu_us_per_request(self) -> float:
        """Server CPU time (user + system) per request, microseconds."""
        return self.server_cpu_s / self.requests * 1e6 if self.requests else float("nan")

    @property
    def sys_us_per_request(self) -> float:
        """The kernel's part of :attr:`cpu_us_per_request` (system time: socket reads and writes)."""
        return self.server_sys_s / self.requests * 1e6 if self.requests else float("nan")

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process so far, seconds (Linux ``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


# ----------------------------------------------------------------------------------------- wrk


_WRK_LUA = """
local f = io.open(os.getenv("MROPE_BENCH_BODY"), "rb")
wrk.method = os.getenv("MROPE_BENCH_METHOD")
if wrk.method == "POST" then wrk.body = f:read("*a") end
f:close()
for name, value in string.gmatch(os.getenv("MROPE_BENCH_HEADERS"), "([^=\\n]+)=([^\\n]*)") do
  wrk.headers[name] = value
end
"""


def _ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if m is None:
        return float("nan")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def wrk_load(
    pid: int,
    base: str,
    name: str,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    workdir: str,
) -> Result:
    """``wrk`` with one thread and ``concurrency`` connections for ``duration`` seconds."""
    body_path = os.path.join(workdir, "body.bin")
    with open(body_path, "wb") as fh:
        fh.write(body or b"")
    script = os.path.join(workdir, "post.lua")
    with open(script, "w") as fh:
        fh.write(_WRK_LUA)
    env = {
        **os.environ,
        "MROPE_BENCH_BODY": body_path,
        "MROPE_BENCH_METHOD": method,
        "MROPE_BENCH_HEADERS": "\n".join(f"{k}={v}" for k, v in headers.items()),  # values hold ";"
    }
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(duration))}s", "--latency", "-s", script]
    user0, sys0 = cpu_times(pid)
    out = subprocess.run(argv + [base + path], capture_output=True, text=True, env=env, timeout=duration + 60)
    user1, sys1 = cpu_times(pid)
    text = out.stdout
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", text)
    # a script wrk cannot load is only reported on stderr: wrk then sends plain GETs (all errors)
    if out.returncode != 0 or done is None or ".lua:" in out.stderr:
        raise RuntimeError(f"wrk failed: {out.stderr}\n{text}")
    requests = int(done.group(1))
    seconds = _ms(done.group(2) + done.group(3)) / 1e3
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", text, re.M))
    errors = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses: (\d+)", text))
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if sock:
        errors += sum(int(x) for x in sock.groups())
    p50, p99 = _ms(lat.get("50", "nan")), _ms(lat.get("99", "nan"))
    return Result(name, requests, errors, seconds, p50, p99, user1 + sys1 - user0 - sys0, sys1 - sys0)


# --------------------------------------------------------------------------------------- httpx


async def httpx_load(
    pid: int,
    base: str,
    name: str,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    workdir: str,
) -> Result:
    """``concurrency`` httpx loops sending the same request until ``duration`` seconds pass."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60.0) as client:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    resp = await client.request(method, path, content=body, headers=headers)
                    ok = resp.status_code == 200 and len(resp.content) > 0
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - t0)
                errors += not ok

        start, (user0, sys0) = time.perf_counter(), cpu_times(pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, (user1, sys1) = time.perf_counter() - start, cpu_times(pid)
    xs = sorted(latencies) or [float("nan")]
    pct = [xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3 for q in (0.5, 0.99)]
    cpu, sys_cpu = user1 + sys1 - user0 - sys0, sys1 - sys0
    return Result(name, len(latencies), errors, elapsed, pct[0], pct[1], cpu, sys_cpu)


def run_load(client: str, *args: object) -> Result:
    if client == "wrk":
        return wrk_load(*args)  # type: ignore[arg-type]
    return asyncio.run(httpx_load(*args))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- scenarios


def run_all(
    client: str, base: str, concurrency: int, duration: float, pid: int, workdir: str, pairs: int = 2
) -> tuple[list[Result], list[tuple[str, int]], list[tuple[Result, Result, Result]]]:
    """Every load scenario, plus VmRSS snapshots of the server between them. The floor and the typical
    request (answered as JSON, then as npy) run as ``pairs`` back-to-back rounds (the first before the
    big requests, the others after), so each ratio compares runs under the same background load."""
    rss = [("started", rss_kib(pid))]
    go = functools.partial(run_load, client, pid, base)
    typical = orjson.dumps(TYPICAL)
    check = httpx.post(base + "/v1/positions", content=typical, headers=JSON_H, timeout=30).json()
    print(f"typical request: {check['num_tokens']} tokens", file=sys.stderr)
    go("warmup", "GET", "/healthz", None, {}, concurrency, 1.0, workdir)
    go("warmup", "POST", "/v1/positions", typical, JSON_H, concurrency, 1.0, workdir)
    rss.append(("after warm-up", rss_kib(pid)))
    results: list[Result] = []
    pair_results: list[tuple[Result, Result, Result]] = []

    def pair(k: int) -> None:
        floor = go(
            f"`GET /healthz` (floor), pair {k}", "GET", "/healthz", None, {}, concurrency, duration, workdir
        )
        name = f"`POST /v1/positions` typical (~3k tokens), JSON, pair {k}"
        typ = go(name, "POST", "/v1/positions", typical, JSON_H, concurrency, duration, workdir)
        name = f"`POST /v1/positions` typical (~3k tokens), npy, pair {k}"
        npy = go(name, "POST", "/v1/positions", typical, NPY_H, concurrency, duration, workdir)
        results.extend((floor, typ, npy))
        pair_results.append((floor, typ, npy))

    pair(1)
    rss.append(("after the first pair", rss_kib(pid)))
    big = orjson.dumps(text_request(128 * 1024))
    name = "`POST /v1/positions` 128k tokens, npy (c=1)"
    results.append(go(name, "POST", "/v1/positions", big, NPY_H, 1, min(duration, 5.0), workdir))
    huge = orjson.dumps(text_request(1_000_000))
    for label, headers in (("JSON", JSON_H), ("npy", NPY_H)):
        name = f"`POST /v1/positions` 1M tokens, {label} (c=1)"
        results.append(go(name, "POST", "/v1/positions", huge, headers, 1, min(duration, 5.0), workdir))
    rss.append(("after 128k / 1M requests", rss_kib(pid)))
    for k in range(2, pairs + 1):
        pair(k)
    rss.append(("after the last pair", rss_kib(pid)))
    return results, rss, pair_results


def run_stages(
    client: str,
    real: tuple[int, str],
    concurrency: int,
    duration: float,
    workdir: str,
    rounds: int,
    workers: int,
) -> list[tuple[str, list[Result], list[Result]]]:
    """``rounds`` rounds of (floor, typical) pairs on the real service and on one server per
    :data:`STAGES` variant, the servers taken in turn within a round so that each sees the same
    background load; returns ``(name, floors, typicals)`` per server."""
    typical = orjson.dumps(TYPICAL)
    servers: list[tuple[str, int, str, subprocess.Popen | None]] = [("service", *real, None)]
    try:
        for stage in STAGES:
            proc, base = start_server(workers, False, stage)
            servers.append((stage, proc.pid, base, proc))
            got = httpx.post(base + "/v1/positions", content=typical, headers=JSON_H, timeout=30).content
            want = httpx.post(real[1] + "/v1/positions", content=typical, headers=JSON_H, timeout=30).content
            if got != want:
                raise RuntimeError(f"stage {stage!r} does not answer the typical request's bytes")
        out: dict[str, tuple[list[Result], list[Result]]] = {name: ([], []) for name, *_ in servers}
        for _, pid, base, _ in servers:
            run_load(
                client,
                pid,
                base,
                "warmup",
                "POST",
                "/v1/positions",
                typical,
                JSON_H,
                concurrency,
                1.0,
                workdir,
            )
        for k in range(1, rounds + 1):
            for name, pid, base, _ in servers:
                go = functools.partial(run_load, client, pid, base)
                floors, typicals = out[name]
                floors.append(
                    go(f"{name} floor {k}", "GET", "/healthz", None, {}, concurrency, duration, workdir)
                )
                typicals.append(
                    go(
                        f"{name} typical {k}",
                        "POST",
                        "/v1/positions",
                        typical,
                        JSON_H,
                        concurrency,
                        duration,
                        workdir,
                    )
                )
        return [(name, *out[name]) for name, *_ in servers]
    finally:
        for *_, proc in servers:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=20)


def print_stages(rows: list[tuple[str, list[Result], list[Result]]]) -> None:
    what = {
        "canned": "reads the body, answers the pre-rendered response",
        "decode": "+ decode (bounded parse, schema, library segments)",
        "build": "+ `mrope.build_positions`",
        "service": "+ weigh, token cap, metric, render (the real endpoint)",
    }
    order = [*STAGES, "service"]
    rows = sorted(rows, key=lambda r: order.index(r[0]))
    print(
        "\n| server (`/v1/positions` does ...) | `/healthz` us/req | typical us/req | typical / floor (req/s) |"
    )
    print("|---|---:|---:|---:|")
    typical_cpu = {}
    for name, floors, typicals in rows:
        floor_cpu = statistics.median(r.cpu_us_per_request for r in floors)
        typ_cpu = statistics.median(r.cpu_us_per_request for r in typicals)
        ratio = statistics.median(t.rps / f.rps for f, t in zip(floors, typicals, strict=True) if f.rps)
        typical_cpu[name] = typ_cpu
        print(f"| {name}: {what[name]} | {floor_cpu:,.0f} | {typ_cpu:,.0f} | {ratio:.2f} |")
    steps = [
        f"{b} {typical_cpu[b] - typical_cpu[a]:+,.0f} us" for a, b in zip(order, order[1:], strict=False)
    ]
    print(
        f"\nserver CPU per typical request, step by step (medians): canned {typical_cpu['canned']:,.0f} us, "
        + ", ".join(steps)
    )


def run_formats(
    client: str, real: tuple[int, str], concurrency: int, duration: float, workdir: str, rounds: int
) -> dict[str, list[tuple[Result, int]]]:
    """``rounds`` rounds of: ``/healthz`` and the typical request as each of :data:`FORMATS` on the real
    service, then each answer's own bytes from a ``canned`` server (:data:`STAGES`: reads the body,
    sends the pre-rendered response, every middleware in place), so the transport of each body is
    measured apart from the work. Returns ``{scenario: [(result, response bytes), ...]}`` in round order."""
    typical = orjson.dumps(TYPICAL)
    servers: list[tuple[str, int, str, dict[str, str], subprocess.Popen | None]] = []
    try:
        for label, fmt, headers in FORMATS:
            proc, base = start_server(1, False, "canned", fmt)
            got = httpx.post(base + "/v1/positions", content=typical, headers=headers, timeout=30)
            want = httpx.post(real[1] + "/v1/positions", content=typical, headers=headers, timeout=30)
            if got.content != want.content or got.headers["content-type"] != want.headers["content-type"]:
                raise RuntimeError(f"the canned {label} server does not answer the service's bytes")
            servers.append((f"canned {label}", proc.pid, base, headers, proc))
        scenarios = [("`GET /healthz` (floor)", *real, None, None)]
        scenarios += [(f"typical, {label}", *real, headers, None) for label, _, headers in FORMATS]
        scenarios += servers
        out: dict[str, list[tuple[Result, int]]] = {name: [] for name, *_ in scenarios}
        sizes = {
            name: len(httpx.post(base + "/v1/positions", content=typical, headers=h, timeout=30).content)
            for name, _, base, h, _ in scenarios
            if h is not None
        }

        def load(name: str, pid: int, base: str, headers: dict[str, str] | None, seconds: float) -> Result:
            if headers is None:
                return run_load(
                    client, pid, base, name, "GET", "/healthz", None, {}, concurrency, seconds, workdir
                )
            args = (client, pid, base, name, "POST", "/v1/positions", typical, headers, concurrency)
            return run_load(*args, seconds, workdir)

        for _, pid, base, headers, _ in scenarios:
            load("warmup", pid, base, headers, 1.0)
        for k in range(1, rounds + 1):
            for name, pid, base, headers, _ in scenarios:
                out[name].append((load(f"{name} {k}", pid, base, headers, duration), sizes.get(name, 0)))
        return out
    finally:
        for *_, proc in servers:
            proc.terminate()
            proc.wait(timeout=20)


def print_formats(rows: dict[str, list[tuple[Result, int]]]) -> None:
    """The ``--formats`` table: medians over the rounds, and each per-round ratio with its spread."""
    floor = [r for r, _ in rows["`GET /healthz` (floor)"]]
    print(
        "\n| scenario | body bytes | req/s | server CPU us/req | of which kernel | / floor by req/s (per round) |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for name, results in rows.items():
        rs = [r for r, _ in results]
        ratios = [r.rps / f.rps for r, f in zip(rs, floor, strict=True) if f.rps]
        print(
            f"| {name} | {results[0][1]:,} | {statistics.median(r.rps for r in rs):,.0f} "
            f"| {statistics.median(r.cpu_us_per_request for r in rs):,.0f} "
            f"| {statistics.median(r.sys_us_per_request for r in rs):,.0f} "
            f"| {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)}) |"
        )
    pairs = (("typical, npy", "typical, JSON"), ("typical, npy", "typical, npy int64"))
    for a, b in (*pairs, ("canned npy", "canned JSON"), ("canned npy int64", "canned JSON")):
        ra, rb = [r for r, _ in rows[a]], [r for r, _ in rows[b]]
        rps = [x.rps / y.rps for x, y in zip(ra, rb, strict=True) if y.rps]
        cpu = [y.cpu_us_per_request / x.cpu_us_per_request for x, y in zip(ra, rb, strict=True)]
        print(
            f"{a} / {b}, per round: throughput {', '.join(f'{x:.2f}' for x in rps)} (median "
            f"{statistics.median(rps):.2f}); by server CPU per request {', '.join(f'{x:.2f}' for x in cpu)} "
            f"(median {statistics.median(cpu):.2f}; above 1: the first is the cheaper)"
        )


def run_hostile(base: str, pid: int) -> list[tuple[str, int, float, int, int]]:
    """(name, status, seconds, response bytes, VmRSS KiB after) of each hostile body, one at a time."""
    out = []
    with httpx.Client(base_url=base, timeout=120) as c:
        for name, path, body in hostile_bodies():
            t0 = time.perf_counter()
            resp = c.post(path, content=body, headers=JSON_H)
            out.append((name, resp.status_code, time.perf_counter() - t0, len(resp.content), rss_kib(pid)))
    return out


STAGES = ("canned", "decode", "build")
"""The variants of ``--stages``, each doing more of the typical request's work before it answers with
the typical request's response, rendered once at start-up (the same bytes the real endpoint sends):

- ``canned``: reads the body, nothing else (what the server, the middlewares and the 37 kB answer cost);
- ``decode``: also decodes it (bounded parse, schema validation, library segments);
- ``build``: also calls ``mrope.build_positions``.

The full service adds weighing, the token count, the metric and rendering. Comparing the variants'
server CPU per request splits the real request's cost as it is paid inside the server (cache-cold,
with uvicorn and the kernel between requests), where the in-process stage timings run hot."""

STAGE_ENV = "MROPE_BENCH_STAGE"
CANNED_FORMAT_ENV = "MROPE_BENCH_CANNED_FORMAT"
"""The format (``json``, ``npy``, ``npy-int64``) a stage server renders its canned answer in (default json)."""


def stage_app():
    """The service app with ``POST /v1/positions`` cut down to the stage named by ``MROPE_BENCH_STAGE``
    (see :data:`STAGES`); every other route and every middleware as served."""
    from starlette.responses import Response

    import mrope
    from mrope.service import _compute as compute
    from mrope.service._direct import DirectRoutes, read_body
    from mrope.service._paths import POSITIONS_PATH
    from mrope.service._token_caps import weigh

    stage = os.environ[STAGE_ENV]
    if stage not in STAGES:
        raise SystemExit(f"{STAGE_ENV} must be one of {STAGES}; got {stage!r}")
    app = make_app()
    state = app.state.service
    _, model, rules, segments = compute.decode_positions(orjson.dumps(TYPICAL), state)
    fmt = os.environ.get(CANNED_FORMAT_ENV, "json")
    canned = compute.count_build_render(segments, weigh(segments, rules), model, rules, fmt, state)
    canned_headers = [h for h in canned.raw_headers if h[0] != b"content-length"]

    async def positions(request):
        raw = await read_body(request.receive)
        if stage != "canned":
            _, model, rules, segments = compute.decode_positions(raw, state)
            if stage == "build":
                mrope.build_positions(segments, model=model, rules=rules)
        response = Response(canned.body)  # its content-length, and the canned answer's other headers
        response.raw_headers.extend(canned_headers)
        return response

    # the hot endpoints are DirectRoutes' (service.direct): swap its positions endpoint before the
    # middleware stack is built at the first request
    direct = [m for m in app.user_middleware if m.cls is DirectRoutes]
    if len(direct) != 1:
        raise SystemExit("the service no longer answers /v1/positions through DirectRoutes: update --stages")
    direct[0].kwargs["endpoints"][POSITIONS_PATH] = positions
    return app


def start_server(
    workers: int,
    access_log: bool,
    stage: str | None = None,
    canned_format: str = "json",
    settings: dict[str, str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """The service as ``mrope serve`` runs it (or, with ``stage``, :func:`stage_app` so, its canned answer
    rendered in ``canned_format``) on a free port; ``settings``: ``MROPE_*`` variables for it."""
    port = free_port()
    app = "" if stage is None else ", app='bench_service:stage_app', factory=True"
    code = (
        "from mrope.service._server import run; "
        f"run(port={port}, workers={workers}, log_level='warning', access_log={access_log}{app})"
    )
    path = os.pathsep.join((str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")))
    env = {**os.environ, **(settings or {}), "PYTHONPATH": path}
    if stage is not None:
        env[STAGE_ENV], env[CANNED_FORMAT_ENV] = stage, canned_format
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("server did not start within 60 s")
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per scenario (default 10)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="worker processes (RSS and CPU are the parent's)")
    ap.add_argument("--client", choices=("wrk", "httpx"), default="wrk" if shutil.which("wrk") else "httpx")
    ap.add_argument(
        "--access-log", action="store_true", help="serve with the access log on (mrope serve's default)"
    )
    ap.add_argument("--profile", metavar="OUT", help="also profile the app (pyinstrument) into this file")
    ap.add_argument("--no-hostile", action="store_true", help="skip the hostile-body timings")
    ap.add_argument("--pairs", type=int, default=2, help="floor / typical pairs (default 2)")
    ap.add_argument(
        "--stages",
        action="store_true",
        help="also run the typical request's stages in servers of their own (see STAGES), --pairs rounds",
    )
    ap.add_argument(
        "--formats",
        action="store_true",
        help="only /healthz and the typical request as JSON, npy and npy int64, on the service and on canned "
        "servers sending the same bytes, --pairs interleaved rounds",
    )
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per request and per stage with valgrind's callgrind (in-process, slow)",
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="only the app's CPU per request in-process: /healthz, typical JSON, typical npy (ratios)",
    )
    args = ap.parse_args()
    if args.in_process:
        rows = in_process_formats()
        print("| request (in-process, no network) | app CPU us/request | healthz / this |\n|---|---:|---:|")
        for name, us in rows:
            print(f"| {name} | {us:,.0f} | {rows[0][1] / us:.2f} |")
        print(
            f"\nnpy / JSON app CPU: {rows[2][1] / rows[1][1]:.2f}, npy int64 / JSON {rows[3][1] / rows[1][1]:.2f} "
            "(below 1: npy is the cheaper)"
        )
        return 0
    if args.instructions:
        counts = count_instructions()
        print("| stage (in-process, callgrind) | instructions per call |\n|---|---:|")
        for name, count in counts:
            print(f"| {name} | {count / 1e3:,.0f}k |")
        print(f"\n`/healthz` / typical by instructions: {counts[0][1] / counts[1][1]:.2f}")
        print(
            f"typical npy / JSON by instructions: {counts[8][1] / counts[1][1]:.2f}; npy int64 / JSON "
            f"{counts[9][1] / counts[1][1]:.2f} (below 1: npy is the cheaper)"
        )
        return 0

    load0 = f"{os.getloadavg()[0]:.2f}"
    proc, base = start_server(args.workers, args.access_log)
    if args.formats:
        try:
            with tempfile.TemporaryDirectory() as workdir:
                rows = run_formats(
                    args.client, (proc.pid, base), args.concurrency, args.duration, workdir, args.pairs
                )
        finally:
            proc.terminate()
            proc.wait(timeout=20)
        print(
            f"\nclient {args.client}, concurrency {args.concurrency}, {args.duration:g} s per scenario, "
            f"{args.pairs} rounds, {os.cpu_count()} CPUs, load average {load0} at start, "
            f"{os.getloadavg()[0]:.2f} at the end"
        )
        print_formats(rows)
        return 0
    try:
        with tempfile.TemporaryDirectory() as workdir:
            results, rss, pair_results = run_all(
                args.client, base, args.concurrency, args.duration, proc.pid, workdir, args.pairs
            )
            hostile = [] if args.no_hostile else run_hostile(base, proc.pid)
            stages = (
                run_stages(
                    args.client,
                    (proc.pid, base),
                    args.concurrency,
                    args.duration,
                    workdir,
                    args.pairs,
                    args.workers,
                )
                if args.stages
                else []
            )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    print(
        f"\nclient {args.client}, concurrency {args.concurrency}, {args.duration:g} s per load scenario, "
        f"{args.workers} worker(s), access log {'on' if args.access_log else 'off'}, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}\n"
    )
    print("| scenario | requests | errors | req/s | p50 ms | p99 ms | server CPU us/req |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.name} | {r.requests} | {r.errors} | {r.rps:,.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} "
            f"| {r.cpu_us_per_request:,.0f} |"
        )
    for label, pick in (("JSON", 1), ("npy", 2)):
        rps_ratios = [p[pick].rps / p[0].rps for p in pair_results if p[0].rps]
        cpu_ratios = [p[0].cpu_us_per_request / p[pick].cpu_us_per_request for p in pair_results]
        print(
            f"\npositions ({label}) / floor, per round: throughput {', '.join(f'{x:.2f}' for x in rps_ratios)} "
            f"(median {statistics.median(rps_ratios):.2f}); server CPU per request "
            f"{', '.join(f'{x:.2f}' for x in cpu_ratios)} (median {statistics.median(cpu_ratios):.2f})."
        )
    npy_json = [p[2].rps / p[1].rps for p in pair_results if p[1].rps]
    npy_json_cpu = [p[1].cpu_us_per_request / p[2].cpu_us_per_request for p in pair_results]
    print(
        f"npy / JSON, same request, per round: throughput {', '.join(f'{x:.2f}' for x in npy_json)}; server "
        f"CPU per request {', '.join(f'{x:.2f}' for x in npy_json_cpu)} (above 1: npy is the cheaper). "
        f"Target >= 0.60 of the floor. Load average {load0} at start, {os.getloadavg()[0]:.2f} at the end."
    )
    print("\n| server VmRSS | MiB |\n|---|---:|")
    for label, kib in rss:
        print(f"| {label} | {kib / 1024:.1f} |")
    if hostile:
        print("\n| hostile body (one at a time) | status | seconds | response bytes | VmRSS after, MiB |")
        print("|---|---:|---:|---:|---:|")
        for name, status, seconds, size, kib in hostile:
            print(f"| {name} | {status} | {seconds:.3f} | {size:,} | {kib / 1024:.1f} |")
    if stages:
        print_stages(stages)
    if args.profile:
        profile_app(5.0, args.profile)
        print(f"\nprofile of the app (typical request, in-process) written to {args.profile}")
    errors = sum(r.errors for r in results)
    print(f"errors: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
