"""benchmarks/bench_patch.py still runs (one family, tiny grids, one repeat); no timing is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_patch_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = ["--families", "glm-4.1v", "--scale", "1", "--repeat", "1"]
    out = subprocess.run(
        [sys.executable, "benchmarks/bench_patch.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("| glm-4.1v |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4].endswith("x") and float(cells[6]) < 1e-5  # a ratio, and the logits agree
