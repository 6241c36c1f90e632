"""Compile the M-RoPE kernel ahead of time for sm_80 and sm_90 (no GPU needed) and print ptxas' resource
report (registers per thread, spill bytes) for the specialisations that matter.

Run: ``python benchmarks/aot_report.py``. Registers above 128 per thread halve the resident warps of a
4-warp program on these GPUs (65536 registers per SM); spills would go to local memory.
"""

from __future__ import annotations

import os
import sys
import time

import triton

from mrope.ops.aot import KernelVariant, compile_variant

QWEN = {"hq": 28, "hk": 4}
VARIANTS = {
    "bf16, fp32 angles, T=8192, Qwen2-VL-7B heads": KernelVariant(**QWEN),
    "bf16, exact angles, T=8192": KernelVariant(exact=True, **QWEN),
    "bf16, fp32 angles, decode T=1": KernelVariant(tokens=1, **QWEN),
    "bf16, exact, rerotate (k only, 4 heads)": KernelVariant(exact=True, rerotate=True, **QWEN),
    "bf16, exact, float32 positions": KernelVariant(exact=True, position_dtype="float32", **QWEN),
    "bf16, GLM-4.1V partial gptj (64 of 128)": KernelVariant(rotary_dim=64, gptj=True, hq=32, hk=2),
    "bf16, HY-V4-VL slice (64 at 192 of 256), exact": KernelVariant(
        exact=True, head_dim=256, rotary_dim=64, rotary_offset=192, gptj=True, hq=32, hk=1
    ),
}


def main() -> int:
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")
    print(f"# mrope kernel compiled ahead of time (triton {triton.__version__}, no GPU)\n")
    print("| variant | arch | warps | registers | spill stores / loads (bytes) | compile s |")
    print("|---|---|---:|---:|---:|---:|")
    for name, variant in VARIANTS.items():
        for arch in (80, 90):
            t0 = time.perf_counter()
            c = compile_variant(variant, arch)
            sec = time.perf_counter() - t0
            print(
                f"| {name} | sm_{arch} | {c.num_warps} | {c.registers} | {c.spill_stores} / {c.spill_loads} "
                f"| {sec:.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
