"""Benchmark scripts run as a subprocess from the checkout's root (``PYTHONPATH`` = the checkout), for tests
that check the scripts still run: :func:`run_script`, and :func:`gpu_check_dry_run` for a section of
``benchmarks/gpu_check.py --dry-run``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_script(args: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` in the checkout's root with ``env`` added; stdout and stderr captured as text."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def gpu_check_dry_run(*sections: str, timeout: float = 600) -> str:
    """stdout of ``gpu_check.py --dry-run --tokens 2 --repeat 1 --only *sections``, asserting that it
    exited 0 with every check passed and none failed."""
    args = ["benchmarks/gpu_check.py", "--dry-run", "--tokens", "2", "--repeat", "1", "--only", *sections]
    out = run_script(args, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all checks passed" in out.stdout and "FAIL" not in out.stdout, out.stdout
    return out.stdout
