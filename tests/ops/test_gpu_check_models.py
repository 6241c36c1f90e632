"""gpu_check.py's patched-model section passes in ``--dry-run``: bench_patch's families patched
with the Triton kernel (interpreted) against the same models unpatched, the dynamic-NTK decode across the
original length, then bench_patch's timing table. Its own file, so that xdist's other worker runs the
other gpu_check sections meanwhile."""

from __future__ import annotations

import pytest
from support.scripts import gpu_check_dry_run


@pytest.mark.timeout(300)  # about 40 s alone
def test_gpu_check_dry_run_models() -> None:
    out = gpu_check_dry_run("models")
    for family in ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"):
        assert f"| patched {family} model vs unpatched (fp32) | ok |" in out
    assert "| patched dynamic-NTK qwen2-vl, 16 decode steps across L0 = 24 (fp32) | ok |" in out
    assert "## patched tiny transformers models, fp32 prefill" in out and "| qwen3-vl | 2 x " in out
    assert "skipped" not in out and "| 2 | mrope triton" not in out  # the kernel sections: another file
