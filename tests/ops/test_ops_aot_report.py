"""``benchmarks/aot_report.py`` compiles the kernel for the registry's rotary shapes, not for a fixed list:
every registered family's shape is in its matrix, a family with a new shape adds a row, and each shape
gets the whole matrix (dtype x angle precision x prefill / decode x in place / out of place x
re-rotation). The full matrix takes minutes (the report's job); here a representative few of the
specialisations that used to run hot are compiled and must stay within 128 registers without spills."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from mrope.models import families, get_family
from mrope.ops._aot import compile_variant

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import aot_report  # noqa: E402

# (head_dim, rotary channels, first rotary channel, gptj) of the registry's shapes, written out by hand
NAMED_SHAPES = {
    "qwen2-vl": (128, 128, 0, False),
    "glm-4.1v": (128, 64, 0, True),
    "qwen3.5": (256, 64, 0, False),
    "qwen4-exp": (256, 256, 0, False),
    "hy-v4-vl": (256, 64, 192, True),
}


def _key(shape: aot_report.RotaryShape) -> tuple[int, int, int, bool]:
    return (shape.head_dim, shape.rotary_dim, shape.rotary_offset, shape.gptj)


def test_report_enumerates_every_registered_family_once() -> None:
    shapes = aot_report.registry_shapes()
    by_family = {name: _key(shape) for shape in shapes for name in shape.families}
    assert sorted(by_family) == sorted(f.name for f in families())  # each family in exactly one shape
    assert sum(len(shape.families) for shape in shapes) == len(families())
    assert len({_key(shape) for shape in shapes}) == len(shapes)  # distinct shapes
    for name, key in NAMED_SHAPES.items():
        assert by_family[name] == key, name


def test_a_family_with_a_new_shape_adds_a_row() -> None:
    base = aot_report.registry_shapes()
    wide = get_family("qwen2-vl")
    wide = dataclasses.replace(wide, name="wide-test", spec=dataclasses.replace(wide.spec, head_dim=192))
    grown = aot_report.registry_shapes([*families(), wide])
    assert len(grown) == len(base) + 1
    assert _key(grown[-1]) == (192, 128, 0, False) and grown[-1].families == ("wide-test",)


def test_each_shape_gets_the_whole_matrix() -> None:
    shape = aot_report.registry_shapes()[0]
    variants = list(aot_report.shape_variants(shape).values())
    assert len(variants) == 3 * 2 * 2 * 2 * 2
    seen = {(v.dtype, v.exact, v.tokens > 1, v.out_of_place, v.rerotate) for v in variants}
    assert len(seen) == 48
    assert {v.dtype for v in variants} == {"bfloat16", "float16", "float32"}
    assert all(_key(shape) == (v.head_dim, v.rotary_dim, v.rotary_offset, v.gptj) for v in variants)


# specialisations that ran hot before the launch bounded each thread's pairs and the pass-through step:
# head_dim 256 full rotary in fp32 (255 registers and 24 spill bytes on sm_80), 64 rotary channels of 128
# out of place in fp32 (a step of 8 channels spilled 20 bytes), 64 of 128 in bf16 (166 registers)
HOT = {
    "qwen4-exp fp32 prefill, sm_80": ("qwen4-exp", {"dtype": "float32"}, 80),
    "glm-4.1v fp32 out of place, sm_80": ("glm-4.1v", {"dtype": "float32"}, 80),
    "glm-4.5v bf16 exact out of place, sm_90": ("glm-4.5v", {"exact": True}, 90),
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_hot_specialisations_stay_within_128_registers(name: str) -> None:
    family, fields, arch = HOT[name]
    (shape,) = [s for s in aot_report.registry_shapes() if family in s.families]
    variant = dataclasses.replace(next(iter(aot_report.shape_variants(shape).values())), **fields)
    assert variant.tokens > 1 and variant.out_of_place and not variant.rerotate
    compiled = compile_variant(variant, arch)
    assert compiled.registers <= aot_report.REGISTER_LIMIT, compiled
    assert compiled.spill_stores == 0 and compiled.spill_loads == 0, compiled
