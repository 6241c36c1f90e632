"""The service's app measured in process (no network, no server): the typical request, CPU per request,
instructions per phase under callgrind, a pyinstrument profile. ``benchmarks/bench_service.py`` runs these
behind ``--in-process``, ``--instructions`` and ``--profile``; its load runs send the same :data:`TYPICAL`.

Run as a script only by :func:`count_instructions` (``python bench_service_app.py N``: the callgrind child).
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
"""The typical request: text, two images and a video as JSON grids (3,142 tokens)."""


async def asgi_call(app, method: str, path: str, body: bytes, accept: bytes | None = None) -> int:
    """One request to ``app`` in-process (no network); returns the status."""
    headers = [(b"host", b"bench")]
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if accept is not None:
        headers.append((b"accept", accept))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status = [0]

    async def receive() -> dict:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status[0] = message["status"]

    await app(scope, receive, send)
    return status[0]


def make_app():
    """The service app as ``mrope serve`` builds it (default settings), to be called in-process."""
    sys.path.insert(0, str(ROOT))
    from mrope.service import Settings
    from mrope.service.app import create_app

    return create_app(Settings())


def profile_app(seconds: float, out_path: str) -> None:
    """pyinstrument over the app alone (ASGI calls in-process, no network) answering the typical request."""
    from pyinstrument import Profiler

    app = make_app()
    body = orjson.dumps(TYPICAL)

    async def loop() -> None:
        for _ in range(200):
            await asgi_call(app, "POST", "/v1/positions", body)
        profiler = Profiler(interval=0.0002)
        profiler.start()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            await asgi_call(app, "POST", "/v1/positions", body)
        profiler.stop()
        with open(out_path, "w") as fh:
            fh.write(profiler.output_text(unicode=False, color=False, show_all=False))

    asyncio.run(loop())


def in_process_formats(rounds: int = 30, calls: int = 40) -> list[tuple[str, float]]:
    """CPU microseconds per request of the app alone (ASGI calls in-process, no network, the thread's CPU
    time): ``/healthz``, the typical request as JSON, as npy (int32 here) and as npy int64, sampled in
    turn (a, b, c, d, a, b, ...) so load from elsewhere falls on all alike; medians. What the network
    adds (the bodies' sizes) is left to the load runs (``--formats``)."""
    app = make_app()
    body = orjson.dumps(TYPICAL)
    cases = (
        ("`GET /healthz`", "GET", "/healthz", b"", None),
        ("typical, JSON", "POST", "/v1/positions", body, None),
        ("typical, npy", "POST", "/v1/positions", body, b"application/x-npy"),
        ("typical, npy int64", "POST", "/v1/positions", body, b"application/x-npy; dtype=int64"),
    )
    samples: list[list[float]] = [[] for _ in cases]

    async def loop() -> None:
        for _ in range(50):
            for _, method, path, payload, accept in cases:
                assert await asgi_call(app, method, path, payload, accept) == 200
        for _ in range(rounds):
            for (_, method, path, payload, accept), out in zip(cases, samples, strict=True):
                t0 = time.thread_time()
                for _ in range(calls):
                    await asgi_call(app, method, path, payload, accept)
                out.append((time.thread_time() - t0) / calls * 1e6)

    asyncio.run(loop())
    return [(name, statistics.median(xs)) for (name, *_), xs in zip(cases, samples, strict=True)]


# -------------------------------------------------------------------------------- instructions

PHASES = (
    "`GET /healthz`, whole app",
    "typical request, whole app",
    "  decode: bounded parse + schema validation + library segments",
    "    of which schema validation (pydantic)",
    "    of which library segments (`to_segments`)",
    "  `mrope.build_positions`",
    "  render JSON",
    "    of which orjson over the `[3, T]` ids",
    "typical request as npy, whole app",
    "typical request as npy int64, whole app",
    "  render npy (int32)",
    "    of which the int32 check and cast (`wire_array`)",
    "  render npy int64",
)


def instruction_phases(n: int) -> None:
    """The child of :func:`count_instructions`: each phase ``n`` times, ``os.getppid()`` between phases
    (callgrind dumps its counters before each call)."""
    import gc

    import mrope
    from mrope.schema import PositionsRequest
    from mrope.service import _compute as compute
    from mrope.service import _convert as convert
    from mrope.service import _jsonbody as jsonbody
    from mrope.service import _render as render

    app = make_app()
    state = app.state.service
    body = orjson.dumps(TYPICAL)
    decoded, model, rules, segments = compute.decode_positions(body, state)
    pos = mrope.build_positions(segments, model=model, rules=rules)
    data = orjson.loads(body)
    shape = jsonbody.inspect(data, state.limits)

    async def calls(method: str, path: str, payload: bytes, accept: bytes | None = None) -> None:
        for _ in range(n):
            assert await asgi_call(app, method, path, payload, accept) == 200

    async def warm() -> None:
        for _ in range(50):
            await asgi_call(app, "GET", "/healthz", b"")
            await asgi_call(app, "POST", "/v1/positions", body)
            await asgi_call(app, "POST", "/v1/positions", body, b"application/x-npy")

    ids_json = functools.partial(orjson.dumps, pos.ids, option=orjson.OPT_SERIALIZE_NUMPY)
    phases = (
        lambda: asyncio.run(calls("GET", "/healthz", b"")),
        lambda: asyncio.run(calls("POST", "/v1/positions", body)),
        lambda: [compute.decode_positions(body, state) for _ in range(n)],
        lambda: [jsonbody.validate(PositionsRequest, data, shape) for _ in range(n)],
        lambda: [convert.to_segments(decoded.segments, rules, state.settings, None) for _ in range(n)],
        lambda: [mrope.build_positions(segments, model=model, rules=rules) for _ in range(n)],
        lambda: [render.render_positions(pos, "json", 4096) for _ in range(n)],
        lambda: [ids_json() for _ in range(n)],
        lambda: asyncio.run(calls("POST", "/v1/positions", body, b"application/x-npy")),
        lambda: asyncio.run(calls("POST", "/v1/positions", body, b"application/x-npy; dtype=int64")),
        lambda: [render.render_positions(pos, "npy", 4096) for _ in range(n)],
        lambda: [render.wire_array(pos.ids, "npy") for _ in range(n)],
        lambda: [render.render_positions(pos, "npy-int64", 4096) for _ in range(n)],
    )
    asyncio.run(warm())
    gc.collect()
    gc.disable()  # a collection lands in one phase or another by chance
    os.getppid()
    for phase in phases:
        phase()
        os.getppid()


def count_instructions(n: int = 200) -> list[tuple[str, float]]:
    """Instructions per call of each of :data:`PHASES`, counted by valgrind's callgrind (load-independent:
    on a shared machine the only figure that does not move with other jobs). Python code, not wall time:
    the server also pays the kernel and uvicorn, and a cache-cold request more per instruction."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (Debian package valgrind)")
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
        argv = [valgrind, "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out}/cg.%p"]
        argv += [sys.executable, __file__, str(n)]
        subprocess.run(argv, env=env, cwd=ROOT, check=True, capture_output=True, timeout=1800)
        # cg.<pid>.<k> for the k-th dump, then cg.<pid> at exit
        dumps = sorted(
            Path(out).glob("cg.*"), key=lambda p: int(p.suffix[1:]) if p.name.count(".") == 2 else 1 << 30
        )
        totals = []
        for path in dumps:
            for line in path.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    totals.append(int(line.split()[1]))
                    break
    # the last len(PHASES) + 1 dumps are the phases and the exit; earlier ones are start-up
    per_phase = totals[-len(PHASES) - 1 : -1]
    return [(name, total / n) for name, total in zip(PHASES, per_phase, strict=True)]


if __name__ == "__main__":
    instruction_phases(int(sys.argv[1]))
