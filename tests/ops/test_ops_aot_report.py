"""``benchmarks/aot_report.py`` compiles the kernel for the registry's kernel shapes, not for a fixed list:
every registered family, research scheme and video-generation transformer is in its matrix, a source with a
new shape adds a row, each shape gets every specialisation the op launches, and every compile-time switch
of the kernel is set by something the report varies. The launches the op builds (``KernelLaunch.of`` on
real tensors, no GPU) must each be one the report compiles. The full matrix takes hours (the report's
job); here the specialisations that ran hot are compiled and must stay within 128 registers without
spills."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
import torch
import triton.language as tl

from mrope.models import VIDEO_MODEL_NAMES, families, get_family, schemes
from mrope.ops import _layouts as layouts
from mrope.ops._aot import _signature, compile_options, compile_variant
from mrope.ops._pairs import tables
from mrope.ops._triton_kernel import mrope_kernel
from mrope.ops._triton_launch import KernelLaunch, Rotation

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import aot_report  # noqa: E402

# (head_dim, rotary channels, first rotary channel, gptj, table heads, q heads, kv heads, positions' dtype),
# written out by hand from the sources' own files (cited in their modules) and the report's heads rule
NAMED_SHAPES = {
    "qwen2-vl": (128, 128, 0, False, 1, 28, 4, "int64"),
    "glm-4.1v": (128, 64, 0, True, 1, 28, 4, "int64"),
    "qwen3.5": (256, 64, 0, False, 1, 28, 4, "int64"),
    "qwen4-exp": (256, 256, 0, False, 1, 28, 4, "int64"),
    "hy-v4-vl": (256, 64, 192, True, 1, 28, 4, "int64"),
    "qwen3-omni": (128, 128, 0, False, 1, 28, 4, "float32"),  # fractional time
    "v2pe": (128, 128, 0, False, 1, 28, 4, "float32"),  # fractional visual stride
    "vrope": (128, 128, 0, False, 1, 28, 4, "int64"),  # 4 position rows: not a switch
    "hope": (128, 128, 0, False, 1, 28, 4, "float32"),  # NoPE pairs: in the table, not a switch
    "mhrope": (128, 128, 0, False, 8, 32, 8, "int64"),  # 8 key-head groups
    "falcon-ocr": (64, 64, 0, True, 16, 16, 16, "float32"),  # golden gate: a table head per query head
    "wan": (128, 128, 0, True, 1, 40, 40, "int64"),  # 44 + 42 + 42 channels, all rotary
    "hunyuan-video": (128, 128, 0, True, 1, 24, 24, "int64"),  # 16 + 56 + 56
    "omnigen2": (96, 96, 0, True, 1, 24, 8, "int64"),  # 32 + 32 + 32, 24 q / 8 kv heads
}
CIRCLE_AGE = {(128, 128, 0, False, 1, 28, 4, "float32"), (128, 128, 0, False, 1, 28, 4, "int64")}
COGVIDEOX = {(64, 64, 0, True, 1, 30, 30, "float64"), (64, 64, 0, True, 1, 30, 30, "int64")}  # 1.0, 1.5


def _sources() -> list[str]:
    return [f.name for f in (*families(), *schemes())] + list(VIDEO_MODEL_NAMES)


def test_report_enumerates_every_family_scheme_and_video_model() -> None:
    shapes = aot_report.registry_shapes()
    by_source: dict[str, set[tuple]] = {}
    for shape in shapes:
        for name in shape.sources:
            by_source.setdefault(name, set()).add(shape.key)
    assert sorted(by_source) == sorted(_sources())
    assert len({shape.key for shape in shapes}) == len(shapes)  # distinct shapes
    for name, key in NAMED_SHAPES.items():
        assert by_source[name] == {key}, name
    assert by_source["circle-rope-age"] == CIRCLE_AGE  # its circle set is float, its M-RoPE set integer
    assert by_source["cogvideox"] == COGVIDEOX


def test_a_source_with_a_new_shape_adds_a_row() -> None:
    base = aot_report.registry_shapes([*families(), *schemes()])
    wide = get_family("qwen2-vl")
    wide = dataclasses.replace(wide, name="wide-test", spec=dataclasses.replace(wide.spec, head_dim=192))
    grown = aot_report.registry_shapes([*families(), *schemes(), wide])
    assert len(grown) == len(base) + 1
    assert grown[-1].key == (192, 128, 0, False, 1, 28, 4, "int64") and grown[-1].sources == ("wide-test",)


def test_each_shape_gets_the_whole_matrix() -> None:
    shape = aot_report.registry_shapes()[0]
    variants = list(aot_report.specialisations(shape).values())
    # 4 dtypes x 2 angle precisions x prefill / decode x (3 head sets x 3 modes + 2 re-rotations)
    assert len(variants) == 4 * 2 * 2 * 11 == len(set(variants))
    assert {v.dtype for v in variants} == {"bfloat16", "float16", "float32", "float64"}
    assert {(v.hq, v.hk) for v in variants} == {(28, 4), (28, 0), (4, 0)}
    assert (
        sum(v.conj for v in variants) == 4 * 2 * 2 * 3 and sum(v.rerotate for v in variants) == 4 * 2 * 2 * 2
    )
    assert {v.position_dtype for v in variants} == {"int64"}


def _constexprs() -> set[str]:
    params = inspect.signature(mrope_kernel).parameters.values()
    return {p.name for p in params if p.annotation in (tl.constexpr, "tl.constexpr")}


def test_every_kernel_switch_is_set_by_the_report() -> None:
    switches = _constexprs()
    assert len(switches) == 18 and "CONJ" in switches  # the annotation is read (negative control)
    assert switches == set(aot_report.SWITCHES)
    values: dict[str, set] = {name: set() for name in switches}
    params = list(inspect.signature(mrope_kernel).parameters)
    for shape in aot_report.registry_shapes():
        for variant in aot_report.specialisations(shape).values():
            for (index,), value in _signature(variant)[1].items():
                values[params[index]].add(value)
    for name in ("GPTJ", "EXACT", "CONJ", "COPY_PASS", "F64", "REROTATE", "PER_HEAD"):
        assert values[name] == {False, True}, name
    assert values["POS_KIND"] == values["POS2_KIND"] == {0, 1, 2}  # int64, float32, float64 positions
    assert values["RNE_BF16"] == {False}  # interpreter only
    assert values["ROT_OFF"] == {0, 192} and values["D_PASS"] == {0, 64, 192}


def _launch(shape: aot_report.KernelShape, variant, tokens: int) -> KernelLaunch:
    """The launch the op builds for ``variant``'s settings on real CPU tensors (``thd``)."""
    dtype = getattr(torch, variant.dtype)
    hq, hk = (variant.hk, 0) if variant.rerotate else (variant.hq, variant.hk)
    q = torch.zeros(tokens, hq, shape.head_dim, dtype=dtype)
    k = torch.zeros(tokens, hk, shape.head_dim, dtype=dtype) if hk else layouts.no_heads(q, "thd")
    outs = (torch.empty_like(q), torch.empty_like(k)) if variant.out_of_place else (q, k)
    positions = torch.zeros(3, 1, tokens, dtype=getattr(torch, shape.position_dtype))
    table = _table(shape)
    rows, freq = tables(table, "exact" if variant.exact else "fp32", positions)
    rotation = Rotation("thd", table.rotary_dim, shape.gptj, variant.exact, table.rotary_offset, variant.conj)
    return KernelLaunch.of(
        (q, k, *outs), positions, rows, freq, rotation, positions if variant.rerotate else None
    )


def _table(shape: aot_report.KernelShape):
    name = shape.sources[0]
    if name in VIDEO_MODEL_NAMES:
        return next(t for t, _, pos in aot_report.video_launches(name) if pos == shape.position_dtype)
    return next(aot_report.family_launches(get_family(name)))[0]


def _compiled_as(variant) -> tuple:
    signature, constexprs, warps = _signature(variant)
    params = list(inspect.signature(mrope_kernel).parameters)
    return {params[i]: v for (i,), v in constexprs.items()}, compile_options(variant, warps)


@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_the_launches_the_op_builds_are_the_ones_the_report_compiles(kind: str) -> None:
    tokens = {"prefill": 300, "decode": 1}[kind]  # 300 tokens: the block sizes of 8,192 (>= 256, >= 16)
    for shape in aot_report.registry_shapes():
        for name, variant in aot_report.specialisations(shape).items():
            if kind not in name:
                continue
            launch = _launch(shape, variant, tokens)
            switches, options = _compiled_as(variant)
            assert {**launch.switches, "RNE_BF16": False} == switches, (shape.label, name)
            assert {k: v for k, v in launch.options.items() if v is not None} == options, (shape.label, name)
    # negative control: a head count the report does not launch gives other block sizes
    shape = aot_report.registry_shapes()[0]
    variant = aot_report.specialisations(shape)["bfloat16, fp32 angles, prefill, q and k, out of place"]
    other = _launch(shape, dataclasses.replace(variant, hq=64, hk=8), tokens)
    assert other.switches["BLOCK_HQ"] != _compiled_as(variant)[0]["BLOCK_HQ"]


# specialisations that ran hot: head_dim 256 full rotary in fp32 (255 registers and 24 spill bytes on
# sm_80 before issue 25), 64 rotary channels of 128 out of place in fp32, 64 of 128 in bf16 (166
# registers); fp64 q / k (152-162 registers at 18 pairs a thread; 138 and 40-byte spills in HY-V4-VL's
# slice at 12); an exact re-rotation of 30 key heads (32 spill bytes under the 128-register cap at 16.5
# pairs a thread); one tensor alone without the cap (MHRoPE's 8 key heads: 150 registers exact, 28-40
# spill bytes fp32 angles; Qwen2-VL's 4 key heads in fp32: 4 spill bytes), before
# FP64_ELEMENTS_PER_THREAD, ONE_TENSOR_ELEMENTS_PER_THREAD and ONE_TENSOR_MAX_REGISTERS; OmniGen2's 48
# frequencies in fp64 (16 / 24 spill bytes at 40 registers, sm_80) before the head split counted the
# shape's frequencies rather than the tile's 64
HOT = {  # name: (source, specialisation, arch)
    "qwen4-exp fp32 prefill": ("qwen4-exp", "float32, fp32 angles, prefill, q and k, out of place", 80),
    "glm-4.1v fp32 out of place": ("glm-4.1v", "float32, fp32 angles, prefill, q and k, out of place", 80),
    "glm-4.5v bf16 exact": ("glm-4.5v", "bfloat16, exact angles, prefill, q and k, out of place", 90),
    "glm-4.1v fp64 prefill": ("glm-4.1v", "float64, fp32 angles, prefill, q and k, out of place", 80),
    "cogvideox fp32 exact rerotate": ("cogvideox", "float32, exact angles, prefill, rerotate, in place", 80),
    "hy-v4-vl fp64 k alone": ("hy-v4-vl", "float64, fp32 angles, prefill, k alone, out of place", 90),
    "mhrope k alone exact": ("mhrope", "float32, exact angles, prefill, k alone, out of place", 80),
    "mhrope k alone fp16": ("mhrope", "float16, fp32 angles, prefill, k alone, out of place", 80),
    "qwen2-vl k alone fp32": ("qwen2-vl", "float32, fp32 angles, prefill, k alone, out of place", 80),
    "qwen2-vl q alone fp32": ("qwen2-vl", "float32, fp32 angles, prefill, q alone, out of place", 80),
    "omnigen2 fp64 prefill": ("omnigen2", "float64, exact angles, prefill, q and k, out of place", 80),
    "hy-v4-vl fp64 exact rerotate": (
        "hy-v4-vl",
        "float64, exact angles, prefill, rerotate, out of place",
        90,
    ),
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_hot_specialisations_stay_within_128_registers(name: str) -> None:
    source, specialisation, arch = HOT[name]
    shape = next(s for s in aot_report.registry_shapes() if source in s.sources)
    compiled = compile_variant(aot_report.specialisations(shape)[specialisation], arch)
    assert compiled.registers <= aot_report.REGISTER_LIMIT, compiled
    assert compiled.spill_stores == 0 and compiled.spill_loads == 0, compiled


def test_the_fp64_bound_is_what_keeps_fp64_within_128_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control of the check above: at the bound fp64 had before (18 pairs a thread, as every
    dtype), GLM-4.1V's 64 of 128 in fp64, q and k out of place, takes 162 registers on sm_80."""
    from mrope.ops import _triton_launch

    monkeypatch.setattr(_triton_launch, "FP64_ELEMENTS_PER_THREAD", _triton_launch.ELEMENTS_PER_THREAD)
    source, specialisation, arch = HOT["glm-4.1v fp64 prefill"]
    shape = next(s for s in aot_report.registry_shapes() if source in s.sources)
    compiled = compile_variant(aot_report.specialisations(shape)[specialisation], arch)
    assert compiled.registers > aot_report.REGISTER_LIMIT, compiled
