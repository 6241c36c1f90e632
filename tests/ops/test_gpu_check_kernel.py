"""gpu_check.py's kernel sections pass in ``--dry-run`` (CPU tensors, Triton interpreter, tiny sizes): the
correctness checks of the kernel against the float64 reference (a check the dry run cannot do reported as
skipped) and the timing table's rows. Its own file, so that xdist's other worker runs the model sections
meanwhile."""

from __future__ import annotations

import pytest
from support.scripts import gpu_check_dry_run


@pytest.mark.timeout(300)  # about 35 s alone
def test_gpu_check_dry_run_passes() -> None:
    out = gpu_check_dry_run("correctness", "timings")
    assert "| 2 | mrope triton, fp32 angles |" in out
    assert "| 2 | device copy of the same bytes |" in out
    assert "| 2 | mrope triton rerotate k in place, exact |" in out
    # a check the dry run cannot do is reported as skipped, never as ok
    assert "| CUDA graph capture + replay (dynamic NTK, no host sync) | skipped | needs CUDA" in out
    assert "(1 skipped, see the table)" in out
    for grown in ("4 axes chunked + ntk_alpha, exact", "offset slice (192 + 64 of 256)", "float32 positions"):
        assert f"| {grown}" in out
    assert "| rerotate in place, exact, shift 1,000,000 | ok |" in out
    assert "| kernel vs transformers Qwen2-VL rotary (fp32 angles) | ok |" in out
    assert "patched" not in out  # the model sections: test_gpu_check_models.py, test_gpu_check_variants.py
