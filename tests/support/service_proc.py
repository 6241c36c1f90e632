"""A real service process for tests: uvicorn in a subprocess on a free loopback port.

:func:`serve` starts it, waits for ``/healthz``, yields a :class:`Server` (base URL, process, log), and
always stops it (terminate, then kill). Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]

RUN_SERVER = (
    "import os; from mrope.service._server import run; "
    "run(port=int(os.environ['MROPE_TEST_PORT']), log_level=os.environ.get('MROPE_TEST_LOG', 'warning'))"
)
"""``python -c`` code that serves like ``mrope serve`` (:func:`service.server.run`)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    base: str
    port: int
    proc: subprocess.Popen
    log_path: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def trickle(sock: socket.socket, filler: bytes, *, tries: int, every_s: float, until: bytes = b"") -> bytes:
    """Send ``filler`` every ``every_s`` seconds (at most ``tries`` times) on a connection whose request is
    still incomplete, collecting what the server answers, until it closes the connection or (when
    ``until`` is given) the answer holds a whole header block and ``until``; returns the bytes received."""
    got = b""
    sock.settimeout(every_s)
    for _ in range(tries):
        try:
            sock.sendall(filler)
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        if not chunk:
            break
        got += chunk
        if until and b"\r\n\r\n" in got and until in got:
            break
    return got


def read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    """Everything the server sends on ``sock`` until it closes the connection (or resets it), or no
    byte comes for ``timeout_s`` seconds."""
    got = b""
    sock.settimeout(timeout_s)
    try:
        while data := sock.recv(65536):
            got += data
    except (TimeoutError, ConnectionResetError, BlockingIOError):
        pass
    return got


def wait_healthy(base: str, proc: subprocess.Popen, log_path: str, startup_s: float) -> None:
    deadline = time.monotonic() + startup_s
    while True:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as fh:
                raise AssertionError(f"server exited with {proc.returncode} before answering:\n{fh.read()}")
        try:
            if httpx.get(base + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"server did not answer /healthz within {startup_s} s")
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def serve(
    argv: list[str] | None = None, env: dict[str, str] | None = None, startup_s: float = 60.0
) -> Iterator[Server]:
    """Start ``argv`` (default: :data:`RUN_SERVER`; ``{port}`` is replaced, and the port is also in
    ``MROPE_TEST_PORT``), wait for ``/healthz``, yield the server, always stop it."""
    port = free_port()
    argv = argv if argv is not None else [sys.executable, "-c", RUN_SERVER]
    argv = [a.replace("{port}", str(port)) for a in argv]
    proc_env = {**os.environ, **(env or {}), "MROPE_TEST_PORT": str(port)}
    proc_env["PYTHONPATH"] = str(ROOT) + os.pathsep + proc_env.get("PYTHONPATH", "")
    fd, log_path = tempfile.mkstemp(prefix="mrope-test-server-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, env=proc_env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, proc, log_path, startup_s)
            yield Server(base, port, proc, log_path)
        finally:
            stop(proc)
    finally:
        os.unlink(log_path)


@contextmanager
def one_slot_server(tokenizer_file: str, url_host: str, timeout_s: float) -> Iterator[Server]:
    """:func:`serve` reading media URLs of ``url_host`` only, with one media slot and a media timeout of
    ``timeout_s``: a reader that keeps its slot shows at once (the next upload waits for it)."""
    env = {
        "MROPE_TOKENIZER": tokenizer_file,
        "MROPE_MEDIA_URL_HOSTS": url_host,
        "MROPE_MEDIA_THREADS": "1",
        "MROPE_MEDIA_TIMEOUT_S": str(timeout_s),
    }
    with serve(env=env) as srv:
        yield srv
