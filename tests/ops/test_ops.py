"""mrope.ops against a float64 reference written from the released rotary rules, on the torch path and on
the Triton kernel (Triton's interpreter on CPU tensors; triton is a dev dependency, so a missing triton
fails here).

The reference follows transformers 5.24's rotaries: ``inv_freq`` models/qwen2_vl/modeling_qwen2_vl.py:122,
chunked sections :138, split-half pairing ``rotate_half`` :147, interleaved sections
models/qwen3_vl/modeling_qwen3_vl.py:410 (summed up in docs/conventions.md, "Rotation").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import triton  # noqa: F401  (a dev dependency: the kernel tests must not be skipped)

from mrope import ApplyError, MRopeError, RopeSpec
from mrope import ops as mrope_ops
from mrope.models import PRESET_NAMES as FAMILY_NAMES
from mrope.models import get_family
from mrope.ops import _dispatch as ops_dispatch
from mrope.ops import _triton_launch as triton_launch
from mrope.ops import apply_mrope, cos_sin
from mrope.ops._freqs import hf_inv_freq_fp32, turn_limbs

# one family name per distinct released rotary spec (the registry grows; equal specs need one run)
PRESET_NAMES = tuple({get_family(name).spec: name for name in reversed(FAMILY_NAMES)}.values())[::-1]

BACKENDS = ("torch", "triton")
LAYOUTS = ("thd", "bhsd", "bshd")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# max |error| / max |x| against the float64 reference, by dtype (fp32 holds the angle to one rounding)
TOL = {torch.float32: 2e-6, torch.bfloat16: 1.6e-2, torch.float16: 2e-3, torch.float64: 2e-6}


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel runs on CPU tensors in Triton's interpreter; mrope reads the variable at call time."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_triton_is_importable_and_used() -> None:
    assert ops_dispatch._tk is triton_launch, ops_dispatch.TRITON_IMPORT_ERROR


# --------------------------------------------------------------------------------------- reference


def ref_axis(spec: RopeSpec) -> np.ndarray:
    """One frequency at a time (transformers 5.24 recomposition_frequencies: chunked
    models/qwen2_vl/modeling_qwen2_vl.py:138, interleaved models/qwen3_vl/modeling_qwen3_vl.py:410,
    hw_alternating models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py:124; HunyuanOCR's 4-axis chunked
    layout is Tencent's apply_rotary_pos_emb_xdrope). Chunked: axis a while i < s_0 + ... + s_a, past the
    sum axis 0. Interleaved (A axes): a >= 1 if i % A == a and i < A s_a, else 0 (three axes: h if
    i % 3 == 1 and i < 3 s_h, w if i % 3 == 2 and i < 3 s_w). hw_alternating (ERNIE): i < s_h + s_w is h
    when even, w when odd; the rest t."""
    sec = spec.mrope_section
    a = len(sec)
    out = []
    for i in range(spec.rotary_dim // 2):
        if spec.section_layout == "chunked":
            axis, edge = 0, 0
            for j, size in enumerate(sec):
                if edge <= i < edge + size:
                    axis = j
                edge += size
        elif spec.section_layout == "interleaved":
            axis = next((j for j in range(1, a) if i % a == j and i < a * sec[j]), 0)
        else:
            axis = (1 if i % 2 == 0 else 2) if i < sec[1] + sec[2] else 0
        out.append(axis)
    return np.array(out)


def ref_inv_freq(spec: RopeSpec, seq_len: int) -> np.ndarray:
    """``theta ** (-2i / d_r)`` (transformers 5.24 models/qwen2_vl/modeling_qwen2_vl.py:122); NTK-alpha
    (HunYuan, models/hunyuan_vl/modeling_hunyuan_vl.py:175) grows the base to ``theta alpha^(d / (d - 2))``;
    the other scaled specs take spec.inv_freq (its formulas are checked against transformers in
    test_ops_parity.py and test_spec.py)."""
    d = spec.rotary_dim
    if spec.scaling.type in ("none", "ntk_alpha"):
        return ref_base(spec) ** (-2.0 * np.arange(d // 2) / d)
    return spec.inv_freq(seq_len)


def ref_base(spec: RopeSpec) -> float:
    """The frequency base: theta, or HunYuan's NTK-alpha ``theta * alpha ** (d / (d - 2))``."""
    d = spec.rotary_dim
    if spec.scaling.type == "ntk_alpha":
        return float(spec.theta) * spec.scaling.alpha ** (d / (d - 2))
    assert spec.scaling.type == "none"
    return float(spec.theta)


def to_canonical(x: torch.Tensor, layout: str) -> torch.Tensor:
    return {"thd": lambda t: t.unsqueeze(0), "bhsd": lambda t: t.transpose(1, 2), "bshd": lambda t: t}[
        layout
    ](x)


def pos_canonical(positions: torch.Tensor, layout: str, axes: int = 3) -> torch.Tensor:
    """``[A, B, S]`` (int64, or float64 for floating positions) from any accepted positions shape."""
    p = positions.to(torch.float64 if positions.dtype.is_floating_point else torch.int64)
    if layout == "thd":
        p = p.reshape(-1, 1, p.shape[-1])
    elif p.dim() == 2:
        p = p.unsqueeze(0)
    return p.expand(axes, p.shape[1], p.shape[2])


def reference(
    x: torch.Tensor, positions: torch.Tensor, spec: RopeSpec, layout: str, angle_dtype: str = "float64"
) -> torch.Tensor:
    """Rotate one tensor (q or k) in float64; returns float64 in x's layout.

    ``angle_dtype="fp32"`` rounds the angle as transformers does (fp32 product of fp32 position and
    transformers' fp32 inv_freq), the rest stays float64. The rotary slice starts at ``spec.rotary_offset``.
    """
    p = pos_canonical(positions, layout, spec.num_axes)
    seq_len = int(p.max()) + 1
    axis = torch.from_numpy(ref_axis(spec))
    assert np.array_equal(ref_axis(spec), spec.axis_map()), (
        "spec.axis_map disagrees with the section rule ref_axis writes out"
    )
    pos = p.permute(1, 2, 0)[..., axis]  # [B, S, F]
    if angle_dtype == "fp32":
        d = spec.rotary_dim
        inv32 = 1.0 / (ref_base(spec) ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = (pos.to(torch.float32) * inv32).double()
    else:
        ang = pos.double() * torch.from_numpy(ref_inv_freq(spec, seq_len))
    factor = spec.attention_factor()
    cos, sin = (ang.cos() * factor)[:, :, None], (ang.sin() * factor)[:, :, None]  # [B, S, 1, F]
    xc = to_canonical(x.double(), layout)
    out = xc.clone()
    f, o = spec.rotary_dim // 2, spec.rotary_offset
    i1 = o + (torch.arange(f) if spec.pairing == "neox" else 2 * torch.arange(f))
    i2 = i1 + f if spec.pairing == "neox" else i1 + 1
    x1, x2 = xc[..., i1], xc[..., i2]
    out[..., i1] = x1 * cos - x2 * sin
    out[..., i2] = x2 * cos + x1 * sin
    rest = [c for c in range(x.shape[-1]) if c not in set(i1.tolist()) | set(i2.tolist())]
    assert torch.equal(out[..., rest], xc[..., rest])
    return {"thd": lambda t: t[0], "bhsd": lambda t: t.transpose(1, 2), "bshd": lambda t: t}[layout](out)


def rel_err(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / x.double().abs().max())


# --------------------------------------------------------------------------------------- inputs


def make_qk(
    layout: str, hq: int, hk: int, d: int, dtype: torch.dtype, b: int = 2, s: int = 5, t: int = 9, seed=0
):
    g = torch.Generator().manual_seed(seed)
    if layout == "thd":
        shapes = [(t, hq, d), (t, hk, d)]
    elif layout == "bhsd":
        shapes = [(b, hq, s, d), (b, hk, s, d)]
    else:
        shapes = [(b, s, hq, d), (b, s, hk, d)]
    return [torch.randn(sh, generator=g, dtype=torch.float64).to(dtype) for sh in shapes]


def make_positions(
    layout: str, b: int = 2, s: int = 5, t: int = 9, high: int = 60, seed: int = 1, axes: int = 3
) -> torch.Tensor:
    """M-RoPE positions with distinct rows (t, h, w for three axes)."""
    g = torch.Generator().manual_seed(seed)
    shape = (axes, t) if layout == "thd" else (axes, b, s)
    return torch.randint(0, high, shape, generator=g)


def run(q, k, pos, spec, layout, backend, **kw):
    return apply_mrope(q, k, pos, spec, layout=layout, backend=backend, **kw)


# --------------------------------------------------------------------------------------- presets


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_presets_exact_fp32_against_reference(preset: str, layout: str, backend: str) -> None:
    spec = get_family(preset).spec
    q, k = make_qk(layout, hq=4, hk=2, d=spec.head_dim, dtype=torch.float32)
    pos = make_positions(layout, high=5000, axes=spec.num_axes)
    qr, kr = run(q, k, pos, spec, layout, backend, angle_precision="exact")
    assert qr.shape == q.shape and kr.shape == k.shape and qr.dtype == torch.float32
    assert rel_err(qr, reference(q, pos, spec, layout), q) < TOL[torch.float32]
    assert rel_err(kr, reference(k, pos, spec, layout), k) < TOL[torch.float32]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_presets_fp32_angles_against_reference(preset: str, layout: str, backend: str) -> None:
    """Default precision: the angle is transformers' fp32 product; everything after it is accurate."""
    spec = get_family(preset).spec
    q, k = make_qk(layout, hq=3, hk=1, d=spec.head_dim, dtype=torch.float32)
    pos = make_positions(layout, high=5000, axes=spec.num_axes)
    qr, kr = run(q, k, pos, spec, layout, backend)
    assert rel_err(qr, reference(q, pos, spec, layout, angle_dtype="fp32"), q) < TOL[torch.float32]
    assert rel_err(kr, reference(k, pos, spec, layout, angle_dtype="fp32"), k) < TOL[torch.float32]
    # and against the exact angles, within what an fp32 angle of size 5000 can hold
    assert rel_err(qr, reference(q, pos, spec, layout), q) < 5000 * 2**-22


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dtypes_in_and_out(layout: str, dtype: torch.dtype, backend: str) -> None:
    spec = get_family("qwen3-vl").spec
    q, k = make_qk(layout, hq=4, hk=2, d=128, dtype=dtype)
    pos = make_positions(layout, high=300)
    qr, kr = run(q, k, pos, spec, layout, backend, angle_precision="exact")
    assert qr.dtype == dtype and kr.dtype == dtype
    assert rel_err(qr, reference(q, pos, spec, layout), q) < TOL[dtype]
    assert rel_err(kr, reference(k, pos, spec, layout), k) < TOL[dtype]


def test_backends_agree() -> None:
    """Both backends compute the same fp32 angles and round the output once to nearest: fp32 results
    differ by trig rounding only, bf16 results are almost all bit-identical (never more than one ulp)."""
    spec = get_family("qwen2-vl").spec
    q, k = make_qk("thd", hq=4, hk=2, d=128, dtype=torch.float32)
    pos = make_positions("thd", high=100)
    a = run(q, k, pos, spec, "thd", "torch")
    b = run(q, k, pos, spec, "thd", "triton")
    for x, y in zip(a, b, strict=True):
        assert float((x - y).abs().max()) < 1e-6
    q16, k16 = q.bfloat16(), k.bfloat16()
    a = run(q16, k16, pos, spec, "thd", "torch")[0].float()
    b = run(q16, k16, pos, spec, "thd", "triton")[0].float()
    assert float((a == b).float().mean()) > 0.99
    assert bool(((a - b).abs() <= 2**-7 * a.abs().clamp_min(2**-20)).all())


# --------------------------------------------------------------------------------------- specs


def _partial_neox() -> RopeSpec:
    return RopeSpec(head_dim=64, rotary_dim=32, theta=10_000.0, mrope_section=(4, 6, 6))


SCALED = {
    "linear": get_family("qwen2-vl").spec.with_scaling(type="linear", factor=4.0),
    "dynamic": get_family("qwen2-vl").spec.with_scaling(
        type="dynamic", factor=2.0, original_max_position_embeddings=32
    ),
    "yarn": get_family("qwen3-vl").spec.with_scaling(
        type="yarn", factor=4.0, original_max_position_embeddings=64
    ),
    "yarn-gptj-partial": get_family("glm-4.1v").spec.with_scaling(
        type="yarn", factor=8.0, original_max_position_embeddings=128, attention_factor=1.3
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SCALED))
def test_scaled_specs(name: str, backend: str) -> None:
    spec = SCALED[name]
    assert (spec.attention_factor() != 1.0) == name.startswith("yarn")
    for layout in ("thd", "bshd"):
        q, k = make_qk(layout, hq=2, hk=1, d=spec.head_dim, dtype=torch.float32)
        pos = make_positions(layout, high=200)  # past original_max_position_embeddings
        qr, kr = run(q, k, pos, spec, layout, backend, angle_precision="exact")
        assert rel_err(qr, reference(q, pos, spec, layout), q) < TOL[torch.float32]
        assert rel_err(kr, reference(k, pos, spec, layout), k) < TOL[torch.float32]


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_ntk_uses_max_position(backend: str) -> None:
    """Dynamic NTK grows the base from seq_len = max(pos) + 1; below the original length it is the plain spec."""
    spec = SCALED["dynamic"]
    plain = replace(spec, scaling=RopeSpec().scaling)
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    short = make_positions("thd", high=20)  # seq_len <= 32
    long = short.clone()
    long[0, 0] = 500
    for precision in ("fp32", "exact"):
        a = run(q, k, short, spec, "thd", backend, angle_precision=precision)
        b = run(q, k, short, plain, "thd", backend, angle_precision=precision)
        assert torch.equal(a[0], b[0])
        c = run(q, k, long, spec, "thd", backend, angle_precision=precision)
        assert rel_err(c[0], reference(q, long, spec, "thd"), q) < 5e-4
        assert not torch.allclose(c[0][1:], run(q, k, long, plain, "thd", backend)[0][1:], atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inplace", (False, True))
def test_partial_rotary_passes_channels_through(backend: str, inplace: bool) -> None:
    for spec in (_partial_neox(), get_family("glm-4.1v").spec):
        q, k = make_qk("thd", hq=3, hk=2, d=spec.head_dim, dtype=torch.float32)
        pos = make_positions("thd")
        q0, k0 = q.clone(), k.clone()
        qr, kr = run(q, k, pos, spec, "thd", backend, angle_precision="exact", inplace=inplace)
        rd = spec.rotary_dim
        assert torch.equal(qr[..., rd:], q0[..., rd:]) and torch.equal(kr[..., rd:], k0[..., rd:])
        assert rel_err(qr, reference(q0, pos, spec, "thd"), q0) < TOL[torch.float32]
        assert rel_err(kr, reference(k0, pos, spec, "thd"), k0) < TOL[torch.float32]
        assert (qr is q) == inplace and (kr is k) == inplace


@pytest.mark.parametrize("backend", BACKENDS)
def test_pairings_differ_and_match_reference(backend: str) -> None:
    neox = RopeSpec(head_dim=32, rotary_dim=32, theta=100.0, mrope_section=(4, 6, 6))
    gptj = replace(neox, pairing="gptj")
    q, k = make_qk("thd", hq=2, hk=1, d=32, dtype=torch.float32)
    pos = make_positions("thd")
    a = run(q, k, pos, neox, "thd", backend)
    b = run(q, k, pos, gptj, "thd", backend)
    assert not torch.allclose(a[0], b[0], atol=1e-2)
    assert rel_err(b[0], reference(q, pos, gptj, "thd", angle_dtype="fp32"), q) < 2e-6


# --------------------------------------------------------------------------------------- 1 to 4 axes, offset, floats

GROWN = {
    "1 axis": RopeSpec(head_dim=32, rotary_dim=32, theta=1e4, mrope_section=(16,)),
    "2 axes chunked, short sections": RopeSpec(head_dim=32, rotary_dim=24, theta=1e4, mrope_section=(3, 5)),
    "2 axes interleaved": RopeSpec(
        head_dim=32, rotary_dim=32, theta=1e4, mrope_section=(8, 8), section_layout="interleaved"
    ),
    "4 axes chunked ntk_alpha (HunyuanOCR)": RopeSpec(
        head_dim=128, rotary_dim=128, theta=1e4, mrope_section=(16, 16, 16, 16)
    ).with_scaling(type="ntk_alpha", alpha=1000.0),
    "4 axes interleaved gptj": RopeSpec(
        head_dim=40,
        rotary_dim=32,
        theta=500.0,
        mrope_section=(4, 4, 4, 3),
        section_layout="interleaved",
        pairing="gptj",
    ),
    "hw_alternating gptj (ERNIE-4.5-VL)": RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=5e5,
        mrope_section=(20, 22, 22),
        section_layout="hw_alternating",
        pairing="gptj",
    ),
    "offset slice at the end (HY-V4-VL)": RopeSpec(
        head_dim=256,
        rotary_dim=64,
        theta=1e4,
        mrope_section=(12, 10, 10),
        section_layout="interleaved",
        pairing="gptj",
        rotary_offset=192,
    ),
    "offset slice in the middle, neox": RopeSpec(
        head_dim=48, rotary_dim=16, theta=1e3, mrope_section=(2, 3, 3), rotary_offset=10
    ),
    "sections short of rotary_dim (qwen4-exp)": RopeSpec(
        head_dim=64, rotary_dim=64, theta=1e4, mrope_section=(5, 5, 4), section_layout="interleaved"
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(GROWN))
def test_grown_specs_against_reference(name: str, backend: str) -> None:
    """Every new spec shape, both angle precisions, out of place and in place, against the float64
    reference written above (its own axis rules, its own NTK-alpha formula, its own offset)."""
    spec = GROWN[name]
    for layout in ("thd", "bhsd"):
        q, k = make_qk(layout, hq=3, hk=2, d=spec.head_dim, dtype=torch.float32)
        pos = make_positions(layout, high=4000, axes=spec.num_axes)
        want_q, want_k = reference(q, pos, spec, layout), reference(k, pos, spec, layout)
        qr, kr = run(q, k, pos, spec, layout, backend, angle_precision="exact")
        assert rel_err(qr, want_q, q) < TOL[torch.float32] and rel_err(kr, want_k, k) < TOL[torch.float32]
        qf, kf = run(q.clone(), k.clone(), pos, spec, layout, backend, inplace=True)
        assert rel_err(qf, want_q, q) < 4000 * 2**-22 and rel_err(kf, want_k, k) < 4000 * 2**-22
        if spec.scaling.type == "none":
            fp32_q = reference(q, pos, spec, layout, angle_dtype="fp32")
            assert rel_err(qf, fp32_q, q) < TOL[torch.float32]


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_row_positions_are_plain_rope_for_any_axis_count(backend: str) -> None:
    for name in ("1 axis", "4 axes chunked ntk_alpha (HunyuanOCR)", "offset slice at the end (HY-V4-VL)"):
        spec = GROWN[name]
        q, k = make_qk("thd", hq=2, hk=1, d=spec.head_dim, dtype=torch.float32)
        flat = make_positions("thd", axes=1)[0]
        a = run(q, k, flat, spec, "thd", backend)
        b = run(q, k, flat.expand(spec.num_axes, -1), spec, "thd", backend)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_float_positions(backend: str, dtype: torch.dtype) -> None:
    """Fractional positions (Qwen3-Omni's float32 time) in both precisions; exact mode is exact for the
    float value given, fp32 mode multiplies float32(pos) as transformers does."""
    spec = get_family("qwen3-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32, t=8)
    g = torch.Generator().manual_seed(7)
    pos = (torch.rand(3, 8, generator=g, dtype=torch.float64) * 900 - 50).to(dtype)
    want = reference(q, pos, spec, "thd")
    exact = run(q, k, pos, spec, "thd", backend, angle_precision="exact")[0]
    assert rel_err(exact, want, q) < TOL[torch.float32]
    fp32 = run(q, k, pos, spec, "thd", backend)[0]
    assert rel_err(fp32, reference(q, pos, spec, "thd", angle_dtype="fp32"), q) < TOL[torch.float32]
    # integral floats rotate exactly like the integers
    ints = torch.randint(0, 10**6, (3, 8), generator=g)
    a = run(q, k, ints, spec, "thd", backend, angle_precision="exact")[0]
    b = run(q, k, ints.double(), spec, "thd", backend, angle_precision="exact")[0]
    assert torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_positions_far_out_in_exact_mode(backend: str) -> None:
    """float64 positions near 1e12 with a fraction of 1/4: exact mode keeps one fp32 rounding."""
    spec = get_family("qwen2-vl").spec
    q, k = make_qk("thd", hq=1, hk=1, d=128, dtype=torch.float32, t=4)
    pos = torch.tensor([[1e12 + 0.25, 3.5, -7e11 - 0.75, 2.0**40 + 0.5]] * 3, dtype=torch.float64)
    import mpmath

    mpmath.mp.prec = 300
    inv, axis = spec.inv_freq(), ref_axis(spec)
    ang = torch.empty(4, 64, dtype=torch.float64)
    for t in range(4):
        for i, f in enumerate(inv.tolist()):
            a = mpmath.mpf(float(pos[axis[i], t])) * mpmath.mpf(f)
            ang[t, i] = float(a - 2 * mpmath.pi * mpmath.nint(a / (2 * mpmath.pi)))
    got = run(q, k, pos, spec, "thd", backend, angle_precision="exact")[0]
    assert rel_err(got, rotate_with_angles(q, ang, spec), q) < 3e-6


def test_positions_must_match_the_axis_count() -> None:
    spec = GROWN["4 axes chunked ntk_alpha (HunyuanOCR)"]
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    with pytest.raises(ApplyError, match=r"\[4, T\] = \[4, 9\] .*the spec has 4 axes.*got \[3, 9\]"):
        apply_mrope(q, k, make_positions("thd"), spec)
    with pytest.raises(ApplyError, match=r"must be \[4, T\] or \[T\]; got \[3, 9\]"):
        cos_sin(make_positions("thd"), spec)


# --------------------------------------------------------------------------------------- GQA, views, in place


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_inplace_views_into_packed_qkv_thd(backend: str, dtype: torch.dtype) -> None:
    spec = get_family("qwen2.5-vl").spec
    t, hq, hk, d = 7, 4, 2, 128
    qkv = torch.randn(t, (hq + 2 * hk) * d, dtype=torch.float64).to(dtype)
    before = qkv.clone()
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    assert not q.is_contiguous() and not k.is_contiguous()
    pos = make_positions("thd", t=t)
    qr, kr = run(q, k, pos, spec, "thd", backend, inplace=True, angle_precision="exact")
    assert qr is q and kr is k
    assert qr.data_ptr() == qkv.data_ptr()
    want_q = reference(before[:, : hq * d].view(t, hq, d), pos, spec, "thd")
    want_k = reference(before[:, hq * d : (hq + hk) * d].view(t, hk, d), pos, spec, "thd")
    assert rel_err(qkv[:, : hq * d].view(t, hq, d), want_q, want_q) < TOL[dtype]
    assert rel_err(qkv[:, hq * d : (hq + hk) * d].view(t, hk, d), want_k, want_k) < TOL[dtype]
    assert torch.equal(qkv[:, (hq + hk) * d :], before[:, (hq + hk) * d :])  # v untouched


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ("bshd", "bhsd"))
def test_strided_views_batched(backend: str, layout: str) -> None:
    """Views into a packed [B, S, (HQ + 2 HK) * D] buffer; for bhsd, transposed views of it."""
    spec = get_family("qwen3-vl").spec
    b, s, hq, hk, d = 2, 5, 3, 1, 128
    qkv = torch.randn(b, s, hq + 2 * hk, d)
    before = qkv.clone()
    q, k = qkv[:, :, :hq], qkv[:, :, hq : hq + hk]
    if layout == "bhsd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    pos = make_positions(layout, b=b, s=s)
    want_q = reference(q.clone(), pos, spec, layout)
    want_k = reference(k.clone(), pos, spec, layout)
    out_q, out_k = run(q, k, pos, spec, layout, backend, angle_precision="exact")
    assert out_q.is_contiguous() and out_k.is_contiguous()
    assert torch.equal(qkv, before)
    assert rel_err(out_q, want_q, want_q) < 2e-6 and rel_err(out_k, want_k, want_k) < 2e-6
    run(q, k, pos, spec, layout, backend, inplace=True, angle_precision="exact")
    assert rel_err(q, want_q, want_q) < 2e-6 and rel_err(k, want_k, want_k) < 2e-6
    assert torch.equal(qkv[:, :, hq + hk :], before[:, :, hq + hk :])


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_heads_and_tokens_cover_every_block(backend: str) -> None:
    """Head and token counts that are not powers of two, enough tokens for several programs."""
    spec = RopeSpec(
        head_dim=16, rotary_dim=12, theta=1000.0, mrope_section=(2, 2, 2), section_layout="interleaved"
    )
    q, k = make_qk("thd", hq=7, hk=3, d=16, dtype=torch.float32, t=300)
    pos = make_positions("thd", t=300, high=1000)
    qr, kr = run(q, k, pos, spec, "thd", backend, angle_precision="exact")
    assert rel_err(qr, reference(q, pos, spec, "thd"), q) < 2e-6
    assert rel_err(kr, reference(k, pos, spec, "thd"), k) < 2e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_position_dtypes(backend: str) -> None:
    """int32, int64 and int16 position ids give the same rotation (the kernel loads what it is given)."""
    spec = get_family("qwen3-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    pos = make_positions("thd", high=3000)
    for precision in ("fp32", "exact"):
        want = run(q, k, pos, spec, "thd", backend, angle_precision=precision)
        for dtype in (torch.int32, torch.int16):
            got = run(q, k, pos.to(dtype), spec, "thd", backend, angle_precision=precision)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs(backend: str) -> None:
    q, k = torch.zeros(0, 4, 128), torch.zeros(0, 2, 128)
    for spec in (get_family("qwen2-vl").spec, SCALED["dynamic"]):
        for precision in ("fp32", "exact"):
            empty = torch.zeros(3, 0, dtype=torch.int64)
            qr, kr = run(q, k, empty, spec, "thd", backend, angle_precision=precision)
            assert qr.shape == (0, 4, 128) and kr.shape == (0, 2, 128)


# --------------------------------------------------------------------------------------- invariances


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_text_positions_are_plain_rope(preset: str, backend: str) -> None:
    """t = h = w gives exactly 1-D RoPE: same bits as 1-D positions, and the 1-D RoPE reference."""
    spec = get_family(preset).spec
    for layout in LAYOUTS:
        q, k = make_qk(layout, hq=2, hk=1, d=spec.head_dim, dtype=torch.float32)
        flat = make_positions(layout)[0]
        mrope = flat.unsqueeze(0).expand(spec.num_axes, *flat.shape).contiguous()
        a = run(q, k, mrope, spec, layout, backend)
        b = run(q, k, flat, spec, layout, backend)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        # plain RoPE: angle pos * theta^(-2i/d), no section logic at all
        d = spec.rotary_dim
        p = pos_canonical(flat, layout)[0]
        ang = p.double()[..., None] * ref_base(spec) ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
        assert rel_err(a[0], _rope_1d(q, ang, spec, layout), q) < 5e-5  # fp32 angles, positions < 60


def _rope_1d(x: torch.Tensor, ang: torch.Tensor, spec: RopeSpec, layout: str) -> torch.Tensor:
    xc = to_canonical(x.double(), layout).clone()
    f, o = spec.rotary_dim // 2, spec.rotary_offset
    c, s = ang.cos()[:, :, None], ang.sin()[:, :, None]
    if spec.pairing == "neox":
        x1, x2 = xc[..., o : o + f].clone(), xc[..., o + f : o + 2 * f].clone()
        xc[..., o : o + f], xc[..., o + f : o + 2 * f] = x1 * c - x2 * s, x2 * c + x1 * s
    else:
        x1, x2 = xc[..., o : o + 2 * f : 2].clone(), xc[..., o + 1 : o + 2 * f : 2].clone()
        xc[..., o : o + 2 * f : 2], xc[..., o + 1 : o + 2 * f : 2] = x1 * c - x2 * s, x2 * c + x1 * s
    return {"thd": lambda t: t[0], "bhsd": lambda t: t.transpose(1, 2), "bshd": lambda t: t}[layout](xc)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset", ("qwen2-vl", "qwen3-vl", "glm-4.1v"))
def test_translation_leaves_scores_unchanged(preset: str, backend: str) -> None:
    spec = get_family(preset).spec
    q, k = make_qk("thd", hq=2, hk=2, d=spec.head_dim, dtype=torch.float32, t=12)
    pos = make_positions("thd", t=12, high=40)
    scores = []
    for shift in (0, 17, 1000):
        qr, kr = run(q, k, pos + shift, spec, "thd", backend, angle_precision="exact")
        scores.append(torch.einsum("thd,shd->hts", qr.double(), kr.double()))
    scale = float(scores[0].abs().max())
    for other in scores[1:]:
        assert float((other - scores[0]).abs().max()) < 2e-5 * scale


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_mode_at_long_positions(backend: str) -> None:
    """exact: error vs float64 near 1e-6 at positions 1e3, 1e5, 1e6; fp32 angles drift with position."""
    spec = get_family("qwen2-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32, t=16)
    for base in (1_000, 100_000, 1_000_000):
        pos = make_positions("thd", t=16, high=50) + base
        want = reference(q, pos, spec, "thd")
        exact = run(q, k, pos, spec, "thd", backend, angle_precision="exact")[0]
        fp32 = run(q, k, pos, spec, "thd", backend)[0]
        assert rel_err(exact, want, q) < 2e-6, base
        if base >= 100_000:
            assert rel_err(fp32, want, q) > 1e-3, base  # the failure mode exact mode fixes


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_mode_extreme_and_negative_positions(backend: str) -> None:
    spec = get_family("qwen3-vl").spec
    q, k = make_qk("thd", hq=1, hk=1, d=128, dtype=torch.float32, t=6)
    pos = torch.tensor([[2**24 + 1, 2**31 - 1, -5, -(10**6), 0, 123456789]] * 3)
    pos[1] -= 3
    out = run(q, k, pos, spec, "thd", backend, angle_precision="exact")[0]
    assert rel_err(out, reference(q, pos, spec, "thd"), q) < 3e-6


def test_turn_limbs_against_mpmath() -> None:
    """The exact-mode table is inv_freq / (2 pi) (inv_freq as given, float64) in 96-bit fixed point, checked
    against mpmath at 300 bits."""
    import mpmath

    mpmath.mp.prec = 300
    for preset in PRESET_NAMES:
        inv = get_family(preset).spec.inv_freq()
        limbs = turn_limbs(inv)
        assert limbs.shape == (3, inv.size) and limbs.dtype == np.int64
        assert ((limbs >= 0) & (limbs < 2**32)).all()
        for i, f in enumerate(inv.tolist()):
            want = mpmath.mpf(f) / (2 * mpmath.pi) * mpmath.mpf(2) ** 96
            got = (int(limbs[0, i]) << 64) + (int(limbs[1, i]) << 32) + int(limbs[2, i])
            assert abs(mpmath.mpf(got) - want) <= 0.5


def exact_angles_mp(spec: RopeSpec, pos: list[list[int]]) -> torch.Tensor:
    """Reference angles (radians, float64 ``[T, F]``) of integer positions ``[A][T]`` as Python ints:
    ``(p * inv_freq) mod 2 pi`` in mpmath at 300 bits, with ``inv_freq = spec.inv_freq()`` taken as exact."""
    import mpmath

    mpmath.mp.prec = 300
    inv = spec.inv_freq()
    axis = ref_axis(spec)
    two_pi = 2 * mpmath.pi
    out = torch.empty(len(pos[0]), len(inv), dtype=torch.float64)
    for t in range(len(pos[0])):
        for i, f in enumerate(inv.tolist()):
            a = mpmath.mpf(pos[axis[i]][t]) * mpmath.mpf(f)
            r = a - two_pi * mpmath.nint(a / two_pi)
            out[t, i] = float(r)
    return out


def rotate_with_angles(x: torch.Tensor, ang: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """float64 rotation of ``x`` ``[T, H, D]`` by angles ``[T, F]`` (neox or gptj pairs, channels from 0)."""
    out = x.double().clone()
    f = spec.rotary_dim // 2
    i1 = torch.arange(f) if spec.pairing == "neox" else 2 * torch.arange(f)
    i2 = i1 + f if spec.pairing == "neox" else i1 + 1
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    x1, x2 = out[..., i1].clone(), out[..., i2].clone()
    out[..., i1] = x1 * c - x2 * s
    out[..., i2] = x2 * c + x1 * s
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_mode_whole_int64_range(backend: str) -> None:
    """Both sides of 2^31, 2^32, 2^53 and the int64 ends. 2^32 + 5 must not rotate like 5."""
    spec = get_family("qwen2-vl").spec
    values = [5, 2**31 - 1, 2**31, 2**32 + 5, -(2**32) - 5, 2**53 + 1, 2**62, -(2**62), 2**63 - 1, -(2**63)]
    pos = torch.tensor([values, values[::-1], [v // 3 for v in values]], dtype=torch.int64)
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32, t=len(values))
    out_q, out_k = run(q, k, pos, spec, "thd", backend, angle_precision="exact")
    ang = exact_angles_mp(spec, pos.tolist())
    assert rel_err(out_q, rotate_with_angles(q, ang, spec), q) < 3e-6
    assert rel_err(out_k, rotate_with_angles(k, ang, spec), k) < 3e-6
    # a 32-bit wrap would rotate position 2^32 + 5 like 5
    big, small = (torch.full((3, 1), v, dtype=torch.int64) for v in (2**32 + 5, 5))
    a = run(q[:1], k[:1], big, spec, "thd", backend, angle_precision="exact")[0]
    b = run(q[:1], k[:1], small, spec, "thd", backend, angle_precision="exact")[0]
    assert float((a - b).abs().max()) > 0.1


# --------------------------------------------------------------------------------------- cos_sin


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_cos_sin_shapes_and_rotation(preset: str) -> None:
    """cos/sin in transformers' shape rotate exactly like apply_mrope (rotate_half or adjacent pairs)."""
    spec = get_family(preset).spec
    pos = make_positions("bshd", axes=spec.num_axes)
    cos, sin = cos_sin(pos, spec, layout="bshd")
    assert cos.shape == (2, 5, spec.rotary_dim) and cos.dtype == torch.float32
    q, k = make_qk("bhsd", hq=2, hk=1, d=spec.head_dim, dtype=torch.float32)
    rd, o = spec.rotary_dim, spec.rotary_offset
    xr = q[..., o : o + rd]
    if spec.pairing == "neox":
        swapped = torch.cat((-xr[..., rd // 2 :], xr[..., : rd // 2]), dim=-1)
    else:
        swapped = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    rotated = xr * cos[:, None] + swapped * sin[:, None]
    manual = torch.cat((q[..., :o], rotated, q[..., o + rd :]), dim=-1)
    got = apply_mrope(q, k, pos, spec, layout="bhsd", backend="torch")[0]
    assert float((manual - got).abs().max()) < 1e-6
    c2, s2 = cos_sin(pos[:, 0], spec, dtype=torch.bfloat16)
    assert c2.shape == (5, rd) and c2.dtype == torch.bfloat16
    assert torch.equal(c2, cos[0].to(torch.bfloat16)) and torch.equal(s2, sin[0].to(torch.bfloat16))


def test_cos_sin_yarn_attention_factor_and_exact() -> None:
    spec = SCALED["yarn"]
    pos = make_positions("thd") + 10**6
    cos, sin = cos_sin(pos, spec, angle_precision="exact")
    assert cos.shape == (9, 128)
    norm = (cos**2 + sin**2).sqrt()
    torch.testing.assert_close(norm, torch.full_like(norm, spec.attention_factor()), rtol=1e-6, atol=0)
    ang = pos_canonical(pos, "thd").permute(1, 2, 0)[0][:, spec.axis_map()].double() * torch.from_numpy(
        spec.inv_freq(int(pos.max()) + 1)
    )
    want = torch.cat((ang.cos(), ang.cos()), -1) * spec.attention_factor()
    assert float((cos.double() - want).abs().max()) < 1e-6


def test_fp32_inv_freq_close_to_spec() -> None:
    """transformers' fp32 arithmetic stays within a few fp32 roundings of the float64 spec for every scaling."""
    specs = [get_family(p).spec for p in PRESET_NAMES] + list(SCALED.values())
    for spec in specs:
        seq = 100
        got = hf_inv_freq_fp32(spec, torch.tensor(seq - 1)).double().numpy()
        np.testing.assert_allclose(got, spec.inv_freq(seq), rtol=4e-7, atol=0)


# --------------------------------------------------------------------------------------- autograd


def _tiny_spec(pairing: str = "neox", rotary_dim: int = 8, head_dim: int = 10) -> RopeSpec:
    sec = {8: (1, 1, 2), 6: (1, 1, 1)}[rotary_dim]
    return RopeSpec(head_dim=head_dim, rotary_dim=rotary_dim, theta=100.0, mrope_section=sec, pairing=pairing)


@pytest.mark.parametrize("pairing", ("neox", "gptj"))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_torch_path(layout: str, pairing: str) -> None:
    spec = _tiny_spec(pairing).with_scaling(type="linear", factor=2.0)
    q, k = make_qk(layout, hq=2, hk=1, d=10, dtype=torch.float64, b=1, s=3, t=3)
    pos = make_positions(layout, b=1, s=3, t=3)
    q.requires_grad_(True)
    k.requires_grad_(True)

    def f(q, k):
        return apply_mrope(q, k, pos, spec, layout=layout, backend="torch")

    assert torch.autograd.gradcheck(f, (q, k))
    assert torch.autograd.gradgradcheck(f, (q, k))


@pytest.mark.parametrize("precision", ("fp32", "exact"))
def test_gradcheck_triton_interpreted(precision: str) -> None:
    spec = _tiny_spec("gptj", rotary_dim=6, head_dim=8)
    q, k = make_qk("thd", hq=2, hk=1, d=8, dtype=torch.float64, t=2)
    pos = make_positions("thd", t=2)
    q.requires_grad_(True)
    k.requires_grad_(True)

    def f(q, k):
        return apply_mrope(q, k, pos, spec, backend="triton", angle_precision=precision)

    assert torch.autograd.gradcheck(f, (q, k), fast_mode=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_is_inverse_rotation_and_inplace_autograd(backend: str) -> None:
    spec = get_family("qwen2-vl").spec
    t, hq, hk, d = 5, 2, 1, 128
    w = torch.randn((hq + 2 * hk) * d, 16, dtype=torch.float32)
    x = torch.randn(t, 16)
    pos = make_positions("thd", t=t)
    grads = []
    for inplace in (False, True):
        wi = w.clone().requires_grad_(True)
        qkv = x @ wi.T
        q = qkv[:, : hq * d].view(t, hq, d)
        k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
        qr, kr = apply_mrope(q, k, pos, spec, backend=backend, inplace=inplace)
        loss = (qr * torch.arange(d)).sum() + (kr**2).sum()
        loss.backward()
        grads.append(wi.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-4)
    # the gradient of <g, R x> with respect to x is R^T g = rotation of g by -angle
    q, k = make_qk("thd", hq=hq, hk=hk, d=d, dtype=torch.float32, t=t)
    q.requires_grad_(True)
    k.requires_grad_(True)
    g_q, g_k = make_qk("thd", hq=hq, hk=hk, d=d, dtype=torch.float32, t=t, seed=5)
    qr, kr = apply_mrope(q, k, pos, spec, backend=backend)
    torch.autograd.backward((qr, kr), (g_q, g_k))
    for grad, g in ((q.grad, g_q), (k.grad, g_k)):
        back = apply_mrope(grad, grad[:, :1], pos, spec, backend=backend)[0]  # rotate forward again
        torch.testing.assert_close(back, g, rtol=0, atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_four_axes_offset_float_positions(backend: str) -> None:
    """The grown op keeps autograd: 4 axes, a rotary slice at an offset, float positions."""
    spec = RopeSpec(
        head_dim=12, rotary_dim=8, theta=100.0, mrope_section=(1, 1, 1, 1), pairing="gptj", rotary_offset=2
    )
    q, k = make_qk("thd", hq=2, hk=1, d=12, dtype=torch.float64, t=3)
    pos = torch.tensor([[0.5, 3.25, 7.0], [1.0, -2.5, 4.0], [2.0, 0.0, 9.75], [6.5, 1.0, 2.0]])
    q.requires_grad_(True)
    k.requires_grad_(True)
    for precision in ("fp32", "exact"):

        def f(q, k, precision=precision):
            return apply_mrope(q, k, pos, spec, backend=backend, angle_precision=precision)

        assert torch.autograd.gradcheck(f, (q, k), fast_mode=backend == "triton")


def test_grad_of_unused_output_is_zero() -> None:
    spec = get_family("qwen2-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    q.requires_grad_(True)
    k.requires_grad_(True)
    qr, _ = apply_mrope(q, k, make_positions("thd"), spec)
    qr.sum().backward()
    assert k.grad is not None and torch.equal(k.grad, torch.zeros_like(k))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inplace", (False, True))
def test_torch_compile_fullgraph(backend: str, inplace: bool) -> None:
    """The custom ops (and the torch path) trace in one graph; outputs match eager."""
    torch._dynamo.reset()
    spec = get_family("qwen3-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    pos = make_positions("thd")
    want = run(q, k, pos, spec, "thd", backend)

    def f(q, k, pos):
        return apply_mrope(q, k, pos, spec, backend=backend, inplace=inplace)

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(q.clone(), k.clone(), pos)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-6)


def test_custom_ops_registered_with_mutation() -> None:
    schema = str(torch.ops.mrope.rotary_.default._schema)
    assert "Tensor(a0!) q" in schema and "Tensor(a1!) k" in schema
    assert "!" not in str(torch.ops.mrope.rotary.default._schema)
    spec = get_family("qwen2-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    pos = make_positions("thd")
    axis = torch.as_tensor(spec.axis_map(), dtype=torch.int32)
    freq = hf_inv_freq_fp32(spec).reshape(1, -1)
    args = (pos.reshape(3, 1, -1), axis, freq, "thd", 128, False, False, False, 1.0, 0)
    torch.library.opcheck(torch.ops.mrope.rotary.default, (q, k, *args))
    # the in-place op declares exactly what it writes: q and k, nothing else
    torch.library.opcheck(torch.ops.mrope.rotary_.default, (q.clone(), k.clone(), *args))


# --------------------------------------------------------------------------------------- bad input


def _ok():
    spec = get_family("qwen2-vl").spec
    q, k = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    return q, k, make_positions("thd"), spec


BAD = {
    "q 2-D": (
        lambda q, k, p, s: (q[0], k, p, s, {}),
        "q for layout 'thd' must be 3-D [T, H, D]; got [2, 128]",
    ),
    "k 4-D in thd": (lambda q, k, p, s: (q, k[None], p, s, {}), "k for layout 'thd' must be 3-D"),
    "bhsd 3-D": (lambda q, k, p, s: (q, k, p, s, {"layout": "bhsd"}), "must be 4-D [B, H, S, D]"),
    "head_dim": (
        lambda q, k, p, s: (q[..., :64], k[..., :64], p, s, {}),
        "q head_dim (last dim) must equal spec.head_dim = 128; got 64",
    ),
    "k head_dim": (lambda q, k, p, s: (q, k[..., :96], p, s, {}), "k head_dim (last dim) must equal"),
    "tokens differ": (lambda q, k, p, s: (q, k[:4], p, s, {}), "q and k must have the same tokens T"),
    "dtypes differ": (lambda q, k, p, s: (q, k.half(), p, s, {}), "same dtype; got q torch.float32 and k"),
    "int q": (
        lambda q, k, p, s: (q.int(), k.int(), p, s, {}),
        "q must be float32, bfloat16, float16 or float64",
    ),
    "positions complex": (lambda q, k, p, s: (q, k, p.to(torch.complex64), s, {}), "integer dtype"),
    "positions bool": (lambda q, k, p, s: (q, k, p > 3, s, {}), "integer dtype"),
    "positions shape": (lambda q, k, p, s: (q, k, p[:, :4], s, {}), "must have shape [3, T] = [3, 9]"),
    "positions [3,1,T] in thd": (lambda q, k, p, s: (q, k, p[:, None], s, {}), "got [3, 1, 9]"),
    "positions rows": (lambda q, k, p, s: (q, k, p[:2], s, {}), "got [2, 9]"),
    "positions list": (lambda q, k, p, s: (q, k, p.tolist(), s, {}), "positions must be a torch.Tensor"),
    "positions device": (
        lambda q, k, p, s: (q, k, p.to("meta"), s, {}),
        "same device as q and k (cpu); got meta",
    ),
    "q not tensor": (lambda q, k, p, s: (q.numpy(), k, p, s, {}), "q must be a torch.Tensor; got ndarray"),
    "spec": (
        lambda q, k, p, s: (q, k, p, s.to_dict(), {}),
        "spec must be a mrope.RopeSpec, a mrope.VideoRope or a mrope.ops.PairTable; got dict",
    ),
    "layout": (lambda q, k, p, s: (q, k, p, s, {"layout": "sbhd"}), "layout must be one of 'thd', 'bhsd'"),
    "backend": (
        lambda q, k, p, s: (q, k, p, s, {"backend": "cuda"}),
        "backend must be one of 'auto', 'torch'",
    ),
    "precision": (
        lambda q, k, p, s: (q, k, p, s, {"angle_precision": "bf16"}),
        "angle_precision must be one of",
    ),
    "inplace": (lambda q, k, p, s: (q, k, p, s, {"inplace": "yes"}), "inplace must be a bool; got 'yes'"),
    "batched pos": (
        lambda q, k, p, s: (q[None].transpose(1, 2), k[None].transpose(1, 2), p, s, {"layout": "bhsd"}),
        "[3, B, S] = [3, 1, 9] (M-RoPE) or [B, S] = [1, 9] (plain RoPE) (the spec has 3 axes: "
        "len(mrope_section)); got [3, 9]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_apply_error(case: str) -> None:
    make, message = BAD[case]
    q, k, pos, spec, kw = make(*_ok())
    with pytest.raises(ApplyError) as info:
        apply_mrope(q, k, pos, spec, **kw)
    assert message in str(info.value)
    assert isinstance(info.value, MRopeError) and isinstance(info.value, ValueError)


def test_bad_device_and_interpreter_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, pos, spec = _ok()
    with pytest.raises(ApplyError, match="same device"):
        apply_mrope(q, k.to("meta"), pos, spec)
    with pytest.raises(ApplyError, match="backend='triton' runs on CUDA tensors"):
        apply_mrope(q.to("meta"), k.to("meta"), pos.to("meta"), spec, backend="triton")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ApplyError, match="TRITON_INTERPRET=1"):
        apply_mrope(q, k, pos, spec, backend="triton")
    assert apply_mrope(q, k, pos, spec)[0].shape == q.shape  # auto picks the torch path on CPU


def test_cos_sin_bad_input() -> None:
    spec = get_family("qwen2-vl").spec
    with pytest.raises(ApplyError, match=r"must be \[3, T\] or \[T\]; got \[2, 9\]"):
        cos_sin(torch.zeros(2, 9, dtype=torch.int64), spec)
    with pytest.raises(ApplyError, match=r"must be \[3, B, S\] or \[B, S\]; got \[9\]"):
        cos_sin(torch.zeros(9, dtype=torch.int64), spec, layout="bshd")
    with pytest.raises(ApplyError, match="integer dtype"):
        cos_sin(torch.zeros(3, 9, dtype=torch.complex64), spec)
    with pytest.raises(ApplyError, match="dtype must be a floating torch.dtype"):
        cos_sin(torch.zeros(3, 9, dtype=torch.int64), spec, dtype=torch.int32)
    with pytest.raises(ApplyError, match="spec must be a mrope.RopeSpec"):
        cos_sin(torch.zeros(3, 9, dtype=torch.int64), "qwen2-vl")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------- rerotate

REROTATE_SPECS = {
    "qwen3-vl": get_family("qwen3-vl").spec,
    "glm-4.1v (gptj, partial)": get_family("glm-4.1v").spec,
    "HY-V4-VL offset slice": GROWN["offset slice at the end (HY-V4-VL)"],
    "HunyuanOCR 4 axes": GROWN["4 axes chunked ntk_alpha (HunyuanOCR)"],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(REROTATE_SPECS))
def test_rerotate_equals_rotating_at_the_new_positions(name: str, backend: str) -> None:
    """Keys rotated at p1 and re-rotated to p2 equal the raw keys rotated at p2 (float64 reference), each
    axis shifted by its own amount, for shifts up to 10^6 and back, exact angles; in place on the cache."""
    spec = REROTATE_SPECS[name]
    a = spec.num_axes
    for layout in ("thd", "bhsd"):
        k, _ = make_qk(layout, hq=2, hk=1, d=spec.head_dim, dtype=torch.float32, seed=11)
        p1 = make_positions(layout, high=300, axes=a)
        for shift in (1, 977, 10**6, -(10**6)):
            per_axis = torch.tensor([shift, shift + 5, 2 * shift, shift - 3][:a])
            p2 = p1 + per_axis.reshape(a, *([1] * (p1.dim() - 1)))
            cache = run(k, k, p1, spec, layout, backend, angle_precision="exact")[0].contiguous()
            got = mrope_ops.rerotate(
                cache, p1, p2, spec, layout=layout, backend=backend, angle_precision="exact"
            )
            assert got is cache
            assert rel_err(got, reference(k, p2, spec, layout), k) < 4e-6, (layout, shift)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerotate_fp32_angles_and_bf16_cache(backend: str) -> None:
    """fp32 precision: rotating by the difference of the two fp32 angles equals transformers' rotation at
    p2 (fp32 angles) to fp32 rounding; a bf16 cache keeps bf16 accuracy; out of place leaves k alone."""
    spec = get_family("qwen2-vl").spec
    k, _ = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32, t=9)
    p1 = make_positions("thd", high=2000)
    p2 = p1 + torch.tensor([[40], [3], [-7]])
    cache = run(k, k, p1, spec, "thd", backend)[0]
    got = mrope_ops.rerotate(cache, p1, p2, spec, backend=backend, inplace=False)
    assert got is not cache and torch.equal(cache, run(k, k, p1, spec, "thd", backend)[0])
    assert rel_err(got, reference(k, p2, spec, "thd", angle_dtype="fp32"), k) < 1e-5
    cache16 = run(k.bfloat16(), k.bfloat16(), p1, spec, "thd", backend, angle_precision="exact")[0]
    mrope_ops.rerotate(cache16, p1, p2, spec, backend=backend, angle_precision="exact")
    assert rel_err(cache16, reference(k, p2, spec, "thd"), k) < 2 * TOL[torch.bfloat16]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerotate_a_block_inside_a_larger_cache(backend: str) -> None:
    """A transformers-style cache [B, HK, S_max, D]: an image block (slots 4..11 of row 1) moves to a new
    offset in place through a view; every other slot is untouched."""
    spec = get_family("qwen3-vl").spec
    b, hk, s_max, d = 2, 2, 16, 128
    raw = torch.randn(b, hk, s_max, d, dtype=torch.float64).float()
    pos = make_positions("bhsd", b=b, s=s_max, high=50)
    cache = run(raw, raw, pos, spec, "bhsd", backend, angle_precision="exact")[0].contiguous()
    before = cache.clone()
    block = cache[1:2, :, 4:12]
    assert not block.is_contiguous()
    p1 = pos[:, 1:2, 4:12]
    p2 = p1 + torch.tensor([123_456, 99, 101]).reshape(3, 1, 1)
    mrope_ops.rerotate(block, p1, p2, spec, layout="bhsd", backend=backend, angle_precision="exact")
    want = reference(raw[1:2, :, 4:12], p2, spec, "bhsd")
    assert rel_err(cache[1:2, :, 4:12], want, want) < 4e-6
    mask = torch.ones_like(cache, dtype=torch.bool)
    mask[1, :, 4:12] = False
    assert torch.equal(cache[mask], before[mask])


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerotate_float_positions(backend: str) -> None:
    spec = get_family("qwen3-vl").spec
    k, _ = make_qk("thd", hq=1, hk=1, d=128, dtype=torch.float32, t=6)
    p1 = torch.rand(3, 6, dtype=torch.float64) * 100
    p2 = p1 + 12345.625
    cache = run(k, k, p1.float(), spec, "thd", backend, angle_precision="exact")[0]
    mrope_ops.rerotate(cache, p1.float(), p2.float(), spec, backend=backend, angle_precision="exact")
    assert rel_err(cache, reference(k, p2.float(), spec, "thd"), k) < 4e-6


def test_rerotate_bad_input() -> None:
    spec = get_family("qwen2-vl").spec
    k, _ = make_qk("thd", hq=1, hk=1, d=128, dtype=torch.float32)
    p = make_positions("thd")
    with pytest.raises(ApplyError, match="from_positions: positions for layout 'thd' must have shape"):
        mrope_ops.rerotate(k, p[:, :4], p, spec)
    with pytest.raises(ApplyError, match="must have shape"):
        mrope_ops.rerotate(k, p, p[:2], spec)
    with pytest.raises(ApplyError, match="dynamic NTK"):
        mrope_ops.rerotate(k, p, p, SCALED["dynamic"])
    with pytest.raises(ApplyError, match="k head_dim"):
        mrope_ops.rerotate(k[..., :64], p, p, spec)
    with pytest.raises(ApplyError, match="inplace must be a bool"):
        mrope_ops.rerotate(k, p, p, spec, inplace=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerotate_compiles_and_custom_ops_check(backend: str) -> None:
    torch._dynamo.reset()
    spec = get_family("qwen2-vl").spec
    k, _ = make_qk("thd", hq=2, hk=1, d=128, dtype=torch.float32)
    p1, p2 = make_positions("thd"), make_positions("thd", seed=4)
    want = mrope_ops.rerotate(k.clone(), p1, p2, spec, backend=backend)

    def f(k, p1, p2):
        return mrope_ops.rerotate(k, p1, p2, spec, backend=backend, inplace=False)

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(k, p1, p2)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    if backend == "triton":
        axis = torch.as_tensor(spec.axis_map(), dtype=torch.int32)
        freq = hf_inv_freq_fp32(spec).reshape(1, -1)
        args = (p2.reshape(3, 1, -1), p1.reshape(3, 1, -1), axis, freq, "thd", 128, False, False, 0)
        torch.library.opcheck(torch.ops.mrope.rerotate.default, (k, *args))
        torch.library.opcheck(torch.ops.mrope.rerotate_.default, (k.clone(), *args))
        assert "Tensor(a0!) k" in str(torch.ops.mrope.rerotate_.default._schema)


def test_rerotate_is_exported_lazily() -> None:
    import mrope

    assert mrope.rerotate is mrope_ops.rerotate


@pytest.mark.parametrize("inplace", (False, True))
@pytest.mark.parametrize("name", ("offset slice at the end (HY-V4-VL)", "offset slice in the middle, neox"))
def test_chunked_low_precision_rotation_covers_every_chunk(
    name: str, inplace: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The torch path rotates bf16 (and anything in place) a chunk of the sequence at a time: with tiny
    chunks (and a short last one) every token is still rotated once, pass-through channels kept."""
    from mrope.ops import _torch_path as torch_path

    monkeypatch.setattr(torch_path, "CHUNK_ELEMENTS", 400)  # steps of 1, 2, 4, 8 tokens here
    spec = GROWN[name]
    for layout in ("bhsd", "thd"):
        q, k = make_qk(layout, hq=3, hk=1, d=spec.head_dim, dtype=torch.bfloat16, s=7, t=11)
        pos = make_positions(layout, s=7, t=11, high=500)
        q0 = q.clone()
        got_q, _ = run(q, k, pos, spec, layout, "torch", inplace=inplace, angle_precision="exact")
        assert rel_err(got_q, reference(q0, pos, spec, layout), q0) < TOL[torch.bfloat16]
        o, rd = spec.rotary_offset, spec.rotary_dim
        assert torch.equal(got_q[..., :o], q0[..., :o]) and torch.equal(
            got_q[..., o + rd :], q0[..., o + rd :]
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_grown_op_compiles_fullgraph_and_passes_opcheck(backend: str) -> None:
    """4 axes, a rotary slice at an offset and float positions keep the custom-op registration: one graph
    under torch.compile, and opcheck of the ops with those arguments."""
    torch._dynamo.reset()
    spec = RopeSpec(
        head_dim=48, rotary_dim=16, theta=1e3, mrope_section=(2, 2, 2, 2), pairing="gptj", rotary_offset=24
    )
    q, k = make_qk("thd", hq=2, hk=1, d=48, dtype=torch.float32)
    pos = make_positions("thd", axes=4).float() + 0.25
    want = run(q, k, pos, spec, "thd", backend, angle_precision="exact")

    def f(q, k, pos):
        return apply_mrope(q, k, pos, spec, backend=backend, angle_precision="exact")

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, pos)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-6)
    if backend == "triton":
        axis = torch.as_tensor(spec.axis_map(), dtype=torch.int32)
        freq = torch.from_numpy(turn_limbs(spec.inv_freq()))
        args = (pos.reshape(4, 1, -1), axis, freq, "thd", 16, True, True, False, 1.0, 24)
        torch.library.opcheck(torch.ops.mrope.rotary.default, (q, k, *args))
        torch.library.opcheck(torch.ops.mrope.rotary_.default, (q.clone(), k.clone(), *args))
