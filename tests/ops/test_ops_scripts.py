"""The apply-op benchmark scripts still run: gpu_check.py refuses to run without CUDA and passes its own
checks in ``--dry-run`` (CPU, Triton interpreter, tiny sizes); bench_apply.py runs at a tiny size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def test_gpu_check_needs_cuda() -> None:
    out = _run(["benchmarks/gpu_check.py"], CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs CUDA" in out.stderr


@pytest.mark.timeout(660)  # 150 s alone; up to about 300 s beside the other worker's tiny models on 2 cores
def test_gpu_check_dry_run_passes() -> None:
    out = _run(["benchmarks/gpu_check.py", "--dry-run", "--tokens", "2", "--repeat", "1"], timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all checks passed" in out.stdout and "FAIL" not in out.stdout
    assert "| 2 | mrope triton, fp32 angles |" in out.stdout
    assert "| 2 | device copy of the same bytes |" in out.stdout
    assert "| 2 | mrope triton rerotate k in place, exact |" in out.stdout
    # a check the dry run cannot do is reported as skipped, never as ok (issue 9)
    assert "| CUDA graph capture + replay (dynamic NTK, no host sync) | skipped | needs CUDA" in out.stdout
    assert "(1 skipped, see the table)" in out.stdout
    for grown in ("4 axes chunked + ntk_alpha, exact", "offset slice (192 + 64 of 256)", "float32 positions"):
        assert f"| {grown}" in out.stdout
    assert "| rerotate in place, exact, shift 1,000,000 | ok |" in out.stdout
    # the patched-model case (issue 15): correctness rows, then bench_patch's timing table
    for family in ("qwen2-vl", "glm-4.1v", "hy-v4-vl", "cohere-compass"):
        assert f"| patched {family} model vs unpatched (fp32) | ok |" in out.stdout
    assert "| patched dynamic-NTK qwen2-vl, 16 decode steps across L0 = 24 (fp32) | ok |" in out.stdout
    assert (
        "## patched tiny transformers models, fp32 prefill" in out.stdout
        and "| qwen3-vl | 2 x " in out.stdout
    )


def test_bench_apply_runs() -> None:
    out = _run(["benchmarks/bench_apply.py", "--tokens", "256", "--repeat", "1"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| transformers |" in out.stdout and "| mrope |" in out.stdout
    assert "| 1,000,000 |" in out.stdout
    assert "| plain torch bf16, cos/sin cache gather |" in out.stdout
    assert "| mrope bf16 (fp32 compute, one rounding) |" in out.stdout
