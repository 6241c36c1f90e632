"""The pair table (mrope.ops.PairTable): every registry family's table equals the section rule the op used
before the table (test_ops.ref_axis writes it out one frequency at a time), the table apply equals a
rotation written out here bit for bit in fp32 (the torch path with torch's cos / sin, the kernel under
Triton's interpreter with numpy's), and tables the spec cannot express (more than three
position rows, NoPE pairs, per-head rows) rotate as a plain-torch reference written here says.

The section rules are transformers 5.24's: chunked models/qwen2_vl/modeling_qwen2_vl.py:138, interleaved
models/qwen3_vl/modeling_qwen3_vl.py:410, h/w alternating models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py:124;
``inv_freq`` models/qwen2_vl/modeling_qwen2_vl.py:122 (HunYuan's NTK-alpha base
models/hunyuan_vl/modeling_hunyuan_vl.py:175).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import triton  # noqa: F401  (a dev dependency: the kernel tests must not be skipped)
from test_ops import ref_axis, ref_base  # the section rule and the base, written out from transformers

from mrope import ApplyError, RopeSpec, SpecError
from mrope.models import PRESET_NAMES as FAMILY_NAMES
from mrope.models import get_family
from mrope.ops import PairTable, apply_mrope, cos_sin, pair_table, rerotate
from mrope.ops._aot import KernelVariant, compile_variant

# one family name per distinct released rotary spec
FAMILIES = tuple({get_family(name).spec: name for name in reversed(FAMILY_NAMES)}.values())[::-1]
BACKENDS = ("torch", "triton")


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# ----------------------------------------------------------------------------------- the old rule


def old_inv_freq32(spec: RopeSpec) -> torch.Tensor:
    """transformers' fp32 ``1 / base ** (arange(0, d, 2) / d)``, base from test_ops.ref_base (theta, or
    HunYuan's NTK-alpha ``theta * alpha ** (d / (d - 2))``: the registry's only scalings)."""
    d = spec.rotary_dim
    return 1.0 / (ref_base(spec) ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d))


def rotate_fp32(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairs: tuple[list, list]
) -> torch.Tensor:
    """``[T, H, D]`` x, ``[T, H or 1, P]`` cos / sin: ``y1 = x1 cos - x2 sin``, ``y2 = x2 cos + x1 sin`` in
    x's dtype, the products and sums as the op has always computed them (``torch.mul`` then ``addcmul_``,
    which rounds differently from a separate multiply and subtract), other channels copied."""
    i1, i2 = pairs
    out = x.clone()
    x1, x2 = x[..., i1], x[..., i2]
    y1 = x1 * cos
    y1.addcmul_(x2, sin, value=-1)
    y2 = x2 * cos
    y2.addcmul_(x1, sin)
    out[..., i1], out[..., i2] = y1, y2
    return out


def pair_channels(pairing: str, offset: int, p: int) -> tuple[list[int], list[int]]:
    if pairing == "neox":
        return [offset + i for i in range(p)], [offset + p + i for i in range(p)]
    return [offset + 2 * i for i in range(p)], [offset + 2 * i + 1 for i in range(p)]


def qkpos(spec_heads: tuple[int, int], d: int, rows: int, t: int = 19, seed: int = 0, high: int = 3000):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, spec_heads[0], d, generator=g)
    k = torch.randn(t, spec_heads[1], d, generator=g)
    pos = torch.randint(0, high, (rows, t), generator=g)
    return q, k, pos


# ------------------------------------------------------------------------------ registry families


@pytest.mark.parametrize("name", FAMILIES)
def test_family_table_is_the_old_section_rule(name: str) -> None:
    spec = get_family(name).spec
    table = pair_table(spec)
    assert table.rows.tolist() == ref_axis(spec).tolist()
    assert torch.equal(torch.from_numpy(table.inv_freq32.copy()), old_inv_freq32(spec))
    assert table.num_rows == len(spec.mrope_section) and table.heads == 1
    assert (table.pairing, table.rotary_offset, table.head_dim) == (
        spec.pairing,
        spec.rotary_offset,
        spec.head_dim,
    )
    assert pair_table(spec) is table  # built once per spec


def test_old_rule_negative_control() -> None:
    """The written-out rule tells the layouts apart (a table from the wrong layout fails the check)."""
    spec = get_family("qwen3-vl").spec
    chunked = RopeSpec(**{**spec.to_dict(), "section_layout": "chunked"})
    assert pair_table(chunked).rows.tolist() != ref_axis(spec).tolist()


@pytest.mark.parametrize("name", FAMILIES)
def test_family_apply_bit_for_bit_fp32_torch(name: str) -> None:
    """fp32 angles ``float32(pos[row]) * inv32``, torch's cos / sin, the rotation: the same bits."""
    spec = get_family(name).spec
    q, k, pos = qkpos((4, 2), spec.head_dim, len(spec.mrope_section), seed=len(name))
    ang = pos.T[:, ref_axis(spec).tolist()].to(torch.float32) * old_inv_freq32(spec)  # [T, P]
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]
    pairs = pair_channels(spec.pairing, spec.rotary_offset, spec.rotary_dim // 2)
    got_q, got_k = apply_mrope(q, k, pos, spec, backend="torch")
    assert torch.equal(got_q, rotate_fp32(q, cos, sin, pairs))
    assert torch.equal(got_k, rotate_fp32(k, cos, sin, pairs))
    # negative control: the neighbouring frequency ladder is not bit-equal
    wrong = pos.T[:, ref_axis(spec).tolist()].to(torch.float32) * (old_inv_freq32(spec) * 1.0000001)
    assert not torch.equal(got_q, rotate_fp32(q, wrong.cos()[:, None], wrong.sin()[:, None], pairs))


@pytest.mark.parametrize("name", FAMILIES)
def test_family_apply_bit_for_bit_fp32_kernel(name: str) -> None:
    """The kernel under Triton's interpreter: the same fp32 angles, numpy's fp32 cos / sin, and the
    rotation as separate fp32 multiplies and adds (the kernel compiles without mul+add contraction):
    the same bits. (Compiled, cos / sin are libdevice's; the angles and the rotation are the same.)"""
    spec = get_family(name).spec
    q, k, pos = qkpos((4, 2), spec.head_dim, len(spec.mrope_section), seed=len(name))
    ang = (pos.T[:, ref_axis(spec).tolist()].to(torch.float32) * old_inv_freq32(spec)).numpy()
    cos = torch.from_numpy(np.cos(ang))[:, None]
    sin = torch.from_numpy(np.sin(ang))[:, None]
    i1, i2 = pair_channels(spec.pairing, spec.rotary_offset, spec.rotary_dim // 2)
    got = apply_mrope(q, k, pos, spec, backend="triton")
    for y, x in zip(got, (q, k), strict=True):
        want = x.clone()
        x1, x2 = x[..., i1], x[..., i2]
        want[..., i1], want[..., i2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        assert torch.equal(y, want)
        want[..., i1] = x1 * cos.roll(1, -1) - x2 * sin.roll(1, -1)  # negative control: pairs shifted
        assert not torch.equal(y, want)


# ------------------------------------------------------------------------------ beyond the specs


def reference64(
    x: torch.Tensor, pos: torch.Tensor, table_rows, inv, pairing: str, offset: int
) -> torch.Tensor:
    """float64 rotation of ``[T, H, D]`` x by ``[R, T]`` positions: per head group ``g`` of ``HT``
    (``len(table_rows)``), pair ``i`` turns by ``pos[rows[g][i]] * inv[g][i]`` (row -1: not at all)."""
    ht = len(table_rows)
    h = x.shape[1]
    out = x.double().clone()
    p = len(table_rows[0])
    i1, i2 = pair_channels(pairing, offset, p)
    for head in range(h):
        g = head // (h // ht)
        for i in range(p):
            row = table_rows[g][i]
            a = pos[row].double() * inv[g][i] if row >= 0 else torch.zeros(x.shape[0], dtype=torch.float64)
            x1, x2 = x[:, head, i1[i]].double(), x[:, head, i2[i]].double()
            out[:, head, i1[i]] = x1 * a.cos() - x2 * a.sin()
            out[:, head, i2[i]] = x2 * a.cos() + x1 * a.sin()
    return out


# max |error| against float64 for |x| < 5 and positions < 3000: an fp32 angle is rounded (up to 1.2e-4 rad at
# 3000), the exact one is not
TOL = {"fp32": 1e-3, "exact": 2e-5}
FOUR_ROWS = [0, 3, 1, 2, 3, 0, 2, 1, 3, 3, 0, 1]
FOUR_INV = [0.9**i / 3 for i in range(12)]


@pytest.mark.parametrize("precision", ("fp32", "exact"))
@pytest.mark.parametrize("backend", BACKENDS)
def test_four_position_rows_float_positions(backend: str, precision: str) -> None:
    """R = 4 rows (VRoPE-style), pairs in any order, float32 positions, GPT-J pairs at an offset."""
    table = PairTable(rows=FOUR_ROWS, inv_freq=FOUR_INV, head_dim=32, pairing="gptj", rotary_offset=4)
    assert table.num_rows == 4
    q, k, pos = qkpos((2, 1), 32, 4)
    fpos = pos.to(torch.float32) / 7  # fractional positions
    got_q, got_k = apply_mrope(q, k, fpos, table, backend=backend, angle_precision=precision)
    for got, x in ((got_q, q), (got_k, k)):
        want = reference64(x, fpos, [FOUR_ROWS], [FOUR_INV], "gptj", 4)
        assert float((got.double() - want).abs().max()) < TOL[precision]
    # negative control: rows 2 and 3 swapped is a different rotation
    swapped = [{2: 3, 3: 2}.get(r, r) for r in FOUR_ROWS]
    assert float((got_q.double() - reference64(q, fpos, [swapped], [FOUR_INV], "gptj", 4)).abs().max()) > 1e-2


@pytest.mark.parametrize("precision", ("fp32", "exact"))
@pytest.mark.parametrize("backend", BACKENDS)
def test_nope_pairs_are_not_rotated(backend: str, precision: str) -> None:
    """Rows -1 (HoPE's temporal pairs): those channels come out as they went in, the rest rotate."""
    rows = [0, -1, 1, -1, 2, 2, -1, 0]
    inv = [1.0, 0.5, 0.25, 0.2, 0.1, 0.05, 0.01, 0.001]
    table = PairTable(rows=rows, inv_freq=inv, head_dim=16)
    q, k, pos = qkpos((3, 1), 16, 3)
    got_q, _ = apply_mrope(q, k, pos, table, backend=backend, angle_precision=precision)
    nope = [1, 3, 6]
    assert torch.equal(got_q[..., nope], q[..., nope]) and torch.equal(
        got_q[..., [8 + i for i in nope]], q[..., [8 + i for i in nope]]
    )
    want = reference64(q, pos, [rows], [inv], "neox", 0)
    assert float((got_q.double() - want).abs().max()) < TOL[precision]
    assert not torch.equal(got_q[..., 0], q[..., 0])  # the others do rotate


@pytest.mark.parametrize("precision", ("fp32", "exact"))
@pytest.mark.parametrize("backend", BACKENDS)
def test_per_head_table(backend: str, precision: str) -> None:
    """A [HT, P] table (MHRoPE: each key-head group one axis at full frequency): q heads h // (HQ / HT),
    k heads h // (HK / HT); 6 q heads and 2 k heads over 2 table heads (3 q heads a group, GQA 3:1)."""
    p = 8
    inv = [[10000.0 ** (-i / p) for i in range(p)]] * 2
    rows = [[1] * p, [2] * p]  # group 0 reads h, group 1 reads w
    table = PairTable(rows=rows, inv_freq=inv, head_dim=2 * p + 4, num_rows=3)
    assert table.heads == 2
    q, k, pos = qkpos((6, 2), 2 * p + 4, 3, t=21)
    got_q, got_k = apply_mrope(q, k, pos, table, backend=backend, angle_precision=precision)
    for got, x in ((got_q, q), (got_k, k)):
        want = reference64(x, pos, rows, inv, "neox", 0)
        assert float((got.double() - want).abs().max()) < TOL[precision]
    # negative control: the groups swapped
    assert float((got_q.double() - reference64(q, pos, rows[::-1], inv, "neox", 0)).abs().max()) > 1e-2
    # re-rotation with the same table: keys rotated at pos move to pos2 as if rotated there
    pos2 = pos + 11
    moved = rerotate(got_k.clone(), pos, pos2, table, backend=backend, angle_precision=precision)
    direct = apply_mrope(q, k, pos2, table, backend=backend, angle_precision=precision)[1]
    assert float((moved - direct).abs().max()) < 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_head_table_bf16_and_in_place(backend: str) -> None:
    p = 4
    rows = [[0, 1, 2, 0], [2, 2, 1, -1], [1, 0, 0, 2], [0, 0, 0, 0]]
    inv = [[0.5**i for i in range(p)]] * 4
    table = PairTable(rows=rows, inv_freq=inv, head_dim=8, pairing="gptj")
    q, k, pos = qkpos((8, 4), 8, 3, t=9)
    qb, kb = q.bfloat16(), k.bfloat16()
    got_q, got_k = apply_mrope(qb.clone(), kb.clone(), pos, table, backend=backend)
    for got, x in ((got_q, qb), (got_k, kb)):
        want = reference64(x.float(), pos, rows, inv, "gptj", 0)
        assert float((got.double() - want).abs().max()) < 1.6e-2 * float(x.abs().max())
    qi, ki = qb.clone(), kb.clone()
    apply_mrope(qi, ki, pos, table, backend=backend, inplace=True)
    assert torch.equal(qi, got_q) and torch.equal(ki, got_k)


def test_cos_sin_of_tables() -> None:
    spec = get_family("qwen3-vl").spec
    pos = torch.randint(0, 500, (3, 7))
    a = cos_sin(pos, spec)
    b = cos_sin(pos, pair_table(spec))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].shape == (7, 128)
    rows = [[0, 1], [2, -1]]
    table = PairTable(rows=rows, inv_freq=[[1.0, 0.5], [0.25, 0.125]], head_dim=4)
    cos, sin = cos_sin(pos, table)
    assert cos.shape == (7, 2, 4)
    want = pos[2].double() * 0.25
    torch.testing.assert_close(cos[:, 1, 0].double(), want.cos(), rtol=0, atol=1e-6)
    assert torch.equal(cos[:, 1, 1], torch.ones(7)) and torch.equal(sin[:, 1, 3], torch.zeros(7))


def test_table_value_type() -> None:
    spec = get_family("qwen2-vl").spec
    a = pair_table(spec)
    b = PairTable(
        rows=spec.axis_map(), inv_freq=spec.inv_freq(), head_dim=128, num_rows=3, inv_freq32=a.inv_freq32
    )
    assert a == b and hash(a) == hash(b)
    assert a != PairTable(rows=spec.axis_map(), inv_freq=spec.inv_freq(), head_dim=128, num_rows=3)
    with pytest.raises(ValueError):
        a.rows[0] = 2  # read-only arrays
    bad = {
        "shape": dict(rows=[0, 1], inv_freq=[1.0], head_dim=4),
        "row below -1": dict(rows=[0, -2], inv_freq=[1.0, 1.0], head_dim=4),
        "num_rows too small": dict(rows=[0, 3], inv_freq=[1.0, 1.0], head_dim=4, num_rows=3),
        "negative frequency": dict(rows=[0, 0], inv_freq=[1.0, -1.0], head_dim=4),
        "nan": dict(rows=[0, 0], inv_freq=[1.0, math.nan], head_dim=4),
        "too wide": dict(rows=[0, 0], inv_freq=[1.0, 1.0], head_dim=4, rotary_offset=2),
        "pairing": dict(rows=[0], inv_freq=[1.0], head_dim=4, pairing="zigzag"),
        "empty": dict(rows=[], inv_freq=[], head_dim=4),
    }
    for name, kwargs in bad.items():
        with pytest.raises(SpecError):
            PairTable(**kwargs)
        assert name


def test_table_bad_inputs_raise_apply_error() -> None:
    table = PairTable(rows=[[0, 1], [1, 0]], inv_freq=[[1.0, 1.0], [1.0, 1.0]], head_dim=4)
    q, k, pos = qkpos((3, 2), 4, 2)
    with pytest.raises(ApplyError, match="multiple of 2"):
        apply_mrope(q, k, pos, table, backend="torch")
    q, k, pos = qkpos((2, 2), 4, 3)
    with pytest.raises(ApplyError, match=r"\[2, T\]"):
        apply_mrope(q, k, pos, table, backend="torch")
    with pytest.raises(ApplyError, match="PairTable"):
        apply_mrope(q, k, pos[:2], "qwen2-vl", backend="torch")  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_table_under_torch_compile(backend: str) -> None:
    torch._dynamo.reset()
    table = PairTable(rows=FOUR_ROWS, inv_freq=FOUR_INV, head_dim=24)
    q, k, pos = qkpos((2, 1), 24, 4)
    want = apply_mrope(q, k, pos, table, backend=backend)

    def f(q, k, pos):
        return apply_mrope(q, k, pos, table, backend=backend)

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, pos)  # one graph
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)  # traced ops may round differently
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "fields",
    (
        {"dtype": "float32", "table_heads": 4},  # MHRoPE on Qwen2-VL: each of the 4 kv heads its own row
        {"dtype": "bfloat16", "exact": True, "table_heads": 2, "tokens": 1},
    ),
)
def test_per_head_kernel_compiles_within_128_registers(fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-head kernel compiled ahead of time (sm_90, no GPU): within 128 registers, no spills, as
    the report requires of the shared-table kernel (tests/ops/test_ops_aot_report.py)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # compiled, not interpreted
    compiled = compile_variant(KernelVariant(**fields), 90)
    assert compiled.registers <= 128 and compiled.spill_stores == 0 and compiled.spill_loads == 0, compiled


def test_per_head_table_gradcheck() -> None:
    """Autograd through a per-head table with NoPE pairs (float64, torch path): the backward is the
    inverse rotation with the same table."""
    table = PairTable(rows=[[0, 1, -1], [2, 0, 1]], inv_freq=[[1.0, 0.3, 0.1]] * 2, head_dim=8)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(5, 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    pos = torch.randint(0, 50, (3, 5), generator=g)
    assert torch.autograd.gradcheck(lambda a, b: apply_mrope(a, b, pos, table, backend="torch"), (q, k))
