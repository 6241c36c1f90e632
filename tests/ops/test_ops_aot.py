"""The compiled (not interpreted) kernel builds for sm_80 and sm_90 without a GPU: ``triton.compile`` with a
CUDA ``GPUTarget`` lowers it to PTX and a cubin (triton's own ptxas), for the specialisations the grown op
added (exact angles, re-rotation, floating positions, a rotary slice at an offset, 4-axis specs need no
other code). The interpreter accepts code the compiler rejects (constexpr reassignment, mixed-type
ternaries), so this is the check that the kernel is real. ptxas' report must show no register spills."""

from __future__ import annotations

import pytest

from mrope.ops._aot import KernelVariant, compile_variant

VARIANTS = {
    "bf16 fp32 angles, Qwen2-VL-7B heads": KernelVariant(),
    "bf16 exact, rerotate": KernelVariant(exact=True, rerotate=True),
    "fp16 exact, float32 positions, 64-channel gptj slice at offset 192 of 256": KernelVariant(
        dtype="float16",
        exact=True,
        position_dtype="float32",
        head_dim=256,
        rotary_dim=64,
        rotary_offset=192,
        gptj=True,
        hq=8,
        hk=1,
    ),
}


@pytest.mark.parametrize("arch", (80, 90))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_kernel_compiles_ahead_of_time_without_spills(name: str, arch: int) -> None:
    compiled = compile_variant(VARIANTS[name], arch)
    assert compiled.arch == arch and compiled.ptx_lines > 100
    assert 0 < compiled.registers <= 255
    assert compiled.spill_stores == 0 and compiled.spill_loads == 0, compiled
