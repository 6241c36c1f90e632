"""gpu_check.py's variant-model section passes in ``--dry-run``: HY-V4-VL (rope slice, DSA indexer),
Cohere-Compass (per-layer-type rotary, a NoPE layer) and Qwen4-Exp (QSA indexer) patched with the Triton
kernel (interpreted) against the same models unpatched. Its own file, so that xdist's other worker runs
the other gpu_check sections meanwhile."""

from __future__ import annotations

import pytest
from support.scripts import gpu_check_dry_run


@pytest.mark.timeout(300)  # about 40 s alone
def test_gpu_check_dry_run_variant_models() -> None:
    out = gpu_check_dry_run("variant-models")
    for family in ("hy-v4-vl", "cohere-compass", "qwen4-exp"):
        assert f"| patched {family} model vs unpatched (fp32) | ok |" in out
    assert "qwen2-vl" not in out  # bench_patch's families and table: test_gpu_check_models.py
