"""RopeSpec: presets, the axis map, validation, (de)serialisation, HF configs and scaling parity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mrope import RopeScaling, RopeSpec, SpecError
from mrope.models import PRESET_NAMES, get_family


def test_chunked_axis_map_matches_spec_rule() -> None:
    spec = get_family("qwen2-vl").spec
    axis = spec.axis_map()
    assert axis.shape == (64,)
    assert (axis[:16] == 0).all() and (axis[16:40] == 1).all() and (axis[40:] == 2).all()


def test_interleaved_axis_map_matches_spec_rule() -> None:
    spec = get_family("qwen3-vl").spec
    axis = spec.axis_map()
    # THW THW ... (20 triples) then the leftover T
    assert axis[:60].tolist() == [0, 1, 2] * 20
    assert axis[60:].tolist() == [0, 0, 0, 0]
    assert np.bincount(axis).tolist() == [24, 20, 20]


def test_interleaved_axis_map_equals_transformers_slices() -> None:
    # transformers' apply_interleaved_mrope overwrites slice(offset, 3 * section, 3) of the t row
    for section in [(24, 20, 20), (16, 8, 8), (12, 10, 10), (11, 11, 10)]:
        n = sum(section)
        spec = RopeSpec(head_dim=2 * n, rotary_dim=2 * n, mrope_section=section, section_layout="interleaved")
        expected = np.zeros(n, dtype=np.int64)
        for axis, offset in ((1, 1), (2, 2)):
            expected[slice(offset, section[axis] * 3, 3)] = axis
        assert spec.axis_map().tolist() == expected.tolist()


def test_sections_short_of_rotary_dim_leave_the_rest_on_axis_0() -> None:
    """qwen4-exp's class defaults: [11, 11, 10] interleaved over 128 frequencies (256 rotary channels).
    transformers (Qwen3.5 rotary) overwrites slice(offset, 3 * section, 3) of the t row: the rest stays t."""
    spec = RopeSpec(head_dim=256, rotary_dim=256, mrope_section=(11, 11, 10), section_layout="interleaved")
    expected = np.zeros(128, dtype=np.int64)
    expected[slice(1, 33, 3)] = 1
    expected[slice(2, 30, 3)] = 2
    assert spec.axis_map().tolist() == expected.tolist()
    chunked = RopeSpec(head_dim=64, rotary_dim=64, mrope_section=(4, 6, 6))
    assert chunked.axis_map().tolist() == [0] * 4 + [1] * 6 + [2] * 6 + [0] * 16


def test_four_axis_chunked_equals_official_xdrope_layout() -> None:
    """HunyuanOCR, Tencent's apply_rotary_pos_emb_xdrope: cos/sin are [.., 128] = cat(f, f) split by
    ``xdrope_section * 2`` (list repetition, 8 chunks of 16) and chunk c takes axis c % 4. Written out per
    channel here: both halves must give every frequency one axis, and that is the chunked map."""
    section = [16, 16, 16, 16]
    channel_axis = []
    for c, size in enumerate(section * 2):
        channel_axis += [c % 4] * size
    first, second = channel_axis[:64], channel_axis[64:]
    assert first == second  # a rotation: both members of pair (i, i + 64) use the same angle
    spec = RopeSpec(head_dim=128, rotary_dim=128, theta=1e4, mrope_section=tuple(section))
    assert spec.num_axes == 4 and spec.axis_map().tolist() == first
    # 5.24's cat(f, f) then split by [2 s]: axis a owns channels [32a, 32a + 32): pairs (c, c + 64) mix
    # axis 0 with axis 2 and axis 1 with axis 3 (transformers 5.24
    # models/hunyuan_vl/modeling_hunyuan_vl.py:181-190)
    hf524 = [a for a, s in enumerate(section) for _ in range(2 * s)]
    assert hf524[:64] != hf524[64:]


def test_hw_alternating_axis_map() -> None:
    """ERNIE-4.5-VL (transformers 5.24 models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py:62-205):
    frequency k < 44 is h if k is even, w if odd; k >= 44 (the 20 lowest rates) is t. Its config lists
    (h, w, t) = (22, 22, 20)."""
    spec = RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=5e5,
        mrope_section=(20, 22, 22),
        section_layout="hw_alternating",
        pairing="gptj",
    )
    want = [(1 if k % 2 == 0 else 2) if k < 44 else 0 for k in range(64)]
    assert spec.axis_map().tolist() == want


def test_axis_counts_for_one_to_four_axes() -> None:
    for sec in [(32,), (10, 22), (8, 8, 8), (16, 16, 16, 16), (3, 5, 7, 9)]:
        for layout in ("chunked", "interleaved"):
            if layout == "interleaved" and len(sec) == 4 and sec[3] * 4 > 64:
                continue
            spec = RopeSpec(head_dim=128, rotary_dim=128, mrope_section=sec, section_layout=layout)
            counts = np.bincount(spec.axis_map(), minlength=len(sec)).tolist()
            assert len(counts) == len(sec)
            assert counts[1:] == list(sec[1:]) and counts[0] == 64 - sum(sec[1:]), (sec, layout)


def test_rotary_offset_round_trips_and_defaults() -> None:
    spec = RopeSpec(
        head_dim=256,
        rotary_dim=64,
        theta=1e4,
        mrope_section=(12, 10, 10),
        section_layout="interleaved",
        pairing="gptj",
        rotary_offset=192,
    )
    assert RopeSpec.from_json(spec.to_json()) == spec
    old = get_family("qwen2-vl").spec.to_dict()
    del old["rotary_offset"]  # dicts written before the field existed
    assert RopeSpec.from_dict(old) == get_family("qwen2-vl").spec


def test_ntk_alpha_matches_hunyuan_formula() -> None:
    """base = theta * alpha ** (d / (d - 2)) (HunYuanVLRotaryEmbedding.compute_ntk_alpha_rope_parameters),
    written out here in float64."""
    spec = RopeSpec(head_dim=128, rotary_dim=128, theta=1e4, mrope_section=(16, 16, 16, 16)).with_scaling(
        type="ntk_alpha", alpha=1000.0
    )
    base = 1e4 * 1000.0 ** (128 / 126)
    np.testing.assert_allclose(spec.inv_freq(), base ** (-np.arange(0, 128, 2) / 128), rtol=1e-14)
    assert spec.attention_factor() == 1.0
    assert RopeSpec.from_json(spec.to_json()) == spec


def test_glm_preset_is_partial_and_adjacent() -> None:
    spec = get_family("glm-4.1v").spec
    assert (spec.head_dim, spec.rotary_dim, spec.pairing) == (128, 64, "gptj")
    assert spec.mrope_section == (8, 12, 12)


def test_inv_freq_matches_formula() -> None:
    spec = get_family("qwen2-vl").spec
    i = np.arange(64)
    np.testing.assert_allclose(spec.inv_freq(), 1e6 ** (-2 * i / 128), rtol=1e-15)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mrope_section": (16, 24, 25)}, "sums to 65 frequency pairs, but rotary_dim 128 has only 64"),
        ({"rotary_dim": 127}, "rotary_dim must be even"),
        ({"head_dim": 64, "rotary_dim": 128, "mrope_section": (16, 24, 24)}, "must not exceed head_dim"),
        ({"theta": 0.0}, "theta must be"),
        ({"theta": float("nan")}, "theta must be"),
        ({"section_layout": "zigzag"}, "section_layout"),
        ({"pairing": "odd"}, "pairing"),
        ({"mrope_section": ()}, "1 to 4 non-negative ints"),
        ({"mrope_section": (8, 8, 8, 8, 8)}, "1 to 4 non-negative ints"),
        ({"mrope_section": (16, -1, 24)}, "1 to 4 non-negative ints"),
        ({"mrope_section": 64}, "sequence of 1 to 4 ints"),
        ({"mrope_section": (0, 40, 24), "section_layout": "interleaved"}, "3\\*s_1 <= 65"),
        ({"mrope_section": (20, 22, 21), "section_layout": "hw_alternating"}, "s_h == s_w"),
        ({"mrope_section": (32, 32), "section_layout": "hw_alternating"}, "three axes"),
        ({"rotary_offset": -2}, "rotary_offset must be an int >= 0"),
        ({"head_dim": 256, "rotary_offset": 192, "rotary_dim": 128}, r"rotary_offset \+ rotary_dim \(320\)"),
        ({"scaling": {"type": "ntk_alpha"}}, "scaling.alpha must be a finite number > 0"),
    ],
)
def test_validation_names_field_and_numbers(kwargs: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        RopeSpec(**kwargs)


def test_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        RopeSpec(mrope_section=(1, 2, 300))


@st.composite
def specs(draw: st.DrawFn) -> RopeSpec:
    layout = draw(st.sampled_from(["chunked", "interleaved", "hw_alternating"]))
    axes = 3 if layout == "hw_alternating" else draw(st.integers(1, 4))
    rest = [draw(st.integers(0, 12)) for _ in range(axes - 1)]
    if layout == "hw_alternating":
        rest = [rest[0], rest[0]]
    # interleaved slot j + A (s_j - 1) must exist: n >= A s_j - A + j + 1
    need = max([axes * s - axes + j + 2 for j, s in enumerate(rest, start=1) if s] + [2])
    low = max(0, need - sum(rest))
    s_0 = draw(st.integers(low, low + 30))
    sec = (s_0, *rest)
    n = max(sum(sec) + draw(st.integers(0, 4)), 2)
    extra = draw(st.integers(0, 8)) * 2
    offset = draw(st.integers(0, extra // 2)) * 2
    kind = draw(st.sampled_from(["none", "linear", "dynamic", "yarn", "ntk_alpha"]))
    scaling = RopeScaling()
    if kind == "ntk_alpha":
        scaling = RopeScaling(type=kind, alpha=draw(st.floats(1.0, 5000.0)))
    elif kind != "none":
        scaling = RopeScaling(
            type=kind,
            factor=draw(st.floats(1.0, 16.0)),
            original_max_position_embeddings=draw(st.integers(128, 1 << 17)),
        )
    return RopeSpec(
        head_dim=2 * n + extra,
        rotary_dim=2 * n,
        theta=draw(st.floats(100.0, 1e8)),
        mrope_section=sec,
        section_layout=layout,
        pairing=draw(st.sampled_from(["neox", "gptj"])),
        scaling=scaling,
        rotary_offset=offset,
    )


@given(specs())
def test_json_round_trip_is_lossless(spec: RopeSpec) -> None:
    again = RopeSpec.from_json(json.dumps(json.loads(spec.to_json())))
    assert again == spec
    np.testing.assert_array_equal(again.inv_freq(), spec.inv_freq())
    counts = np.bincount(spec.axis_map(), minlength=spec.num_axes).tolist()
    assert len(counts) == spec.num_axes and counts[1:] == list(spec.mrope_section[1:])
    assert counts[0] == spec.num_freqs - sum(spec.mrope_section[1:])  # s_0 plus the frequencies left over


def test_from_dict_rejects_unknown_fields() -> None:
    with pytest.raises(SpecError, match="unknown RopeSpec fields"):
        RopeSpec.from_dict({"head_dim": 128, "rope_theta": 5})
    with pytest.raises(SpecError, match="malformed"):
        RopeSpec.from_json("{not json")


# ----------------------------------------------------------------------------- scaling vs transformers


def _hf_inv_freq(kind: str, params: dict, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=2,
        max_position_embeddings=params.pop("max_position_embeddings", 4096),
        rope_parameters={"rope_type": kind, **params},
    )
    kwargs = {} if seq_len is None else {"seq_len": seq_len}
    inv, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu", **kwargs)
    return inv.double().numpy(), float(factor)


@pytest.mark.parametrize(
    ("scaling", "params"),
    [
        (
            RopeScaling(type="linear", factor=4.0),
            {"rope_theta": 1e6, "factor": 4.0},
        ),
        (
            RopeScaling(type="yarn", factor=4.0, original_max_position_embeddings=4096),
            {"rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 4096},
        ),
        (
            RopeScaling(
                type="yarn",
                factor=8.0,
                original_max_position_embeddings=2048,
                beta_fast=16,
                beta_slow=2,
                mscale=1.0,
                mscale_all_dim=0.5,
            ),
            {
                "rope_theta": 1e4,
                "factor": 8.0,
                "original_max_position_embeddings": 2048,
                "beta_fast": 16,
                "beta_slow": 2,
                "mscale": 1.0,
                "mscale_all_dim": 0.5,
            },
        ),
        (
            RopeScaling(type="dynamic", factor=2.0, original_max_position_embeddings=4096),
            {"rope_theta": 1e6, "factor": 2.0},
        ),
    ],
)
def test_scaling_matches_transformers(scaling: RopeScaling, params: dict) -> None:
    spec = RopeSpec(head_dim=128, rotary_dim=128, theta=params["rope_theta"], scaling=scaling)
    hf_inv, hf_factor = _hf_inv_freq(scaling.type, dict(params))
    # transformers computes in float32; ours is float64
    np.testing.assert_allclose(spec.inv_freq(), hf_inv, rtol=2e-6)
    assert spec.attention_factor() == pytest.approx(hf_factor, rel=1e-12)
    if scaling.type == "dynamic":
        hf_long, _ = _hf_inv_freq("dynamic", dict(params), seq_len=10_000)
        np.testing.assert_allclose(spec.inv_freq(seq_len=10_000), hf_long, rtol=2e-6)


def test_dynamic_scaling_has_no_jump_at_the_length_boundary() -> None:
    l0, factor = 4096, 4.0
    spec = RopeSpec(theta=1e6).with_scaling(
        type="dynamic", factor=factor, original_max_position_embeddings=l0
    )

    def inv(seq_len: int) -> np.ndarray:
        return spec.inv_freq(seq_len=seq_len)

    def rel(a: int, b: int) -> float:
        return float(np.max(np.abs(inv(b) / inv(a) - 1.0)))

    # up to L0 nothing changes; past it the base grows by O(factor / L0) per token, never at once
    np.testing.assert_array_equal(inv(l0 - 1), inv(l0))
    np.testing.assert_array_equal(inv(l0), RopeSpec(theta=1e6).inv_freq())
    first, second = rel(l0, l0 + 1), rel(l0 + 1, l0 + 2)
    assert 0 < first < 2 * factor / l0
    assert first == pytest.approx(second, rel=0.01)
    # NTK-aware: the lowest frequency shrinks by exactly (factor * L / L0 - factor + 1) at length L
    for length in (2 * l0, 4 * l0):
        ratio = inv(length)[-1] / inv(l0)[-1]
        assert ratio == pytest.approx(1 / (factor * length / l0 - factor + 1), rel=1e-12)


def test_scaling_validation() -> None:
    with pytest.raises(SpecError, match="rotary_dim > 2"):
        RopeSpec(head_dim=2, rotary_dim=2, mrope_section=(1, 0, 0)).with_scaling(
            type="dynamic", factor=2.0, original_max_position_embeddings=64
        )
    with pytest.raises(SpecError, match="original_max_position_embeddings"):
        RopeScaling(type="yarn", factor=2.0)
    with pytest.raises(SpecError, match="factor must be"):
        RopeScaling(type="linear", factor=0)
    with pytest.raises(SpecError, match="scaling.type"):
        RopeScaling(type="ntk")
    with pytest.raises(SpecError, match="ntk_alpha scaling needs rotary_dim > 2"):
        RopeSpec(head_dim=2, rotary_dim=2, mrope_section=(1,)).with_scaling(type="ntk_alpha", alpha=2.0)


def test_all_presets_exist() -> None:
    assert set(PRESET_NAMES) >= {"qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"}
    for name in PRESET_NAMES:
        assert isinstance(get_family(name).spec, RopeSpec)
    assert torch.tensor(get_family("qwen3-vl").spec.axis_map()).dtype == torch.int64


def test_every_scaling_type_has_one_formula() -> None:
    from mrope._scaling import INV_FREQ_FORMULAS, SCALING_TYPES

    assert tuple(INV_FREQ_FORMULAS) == SCALING_TYPES == ("none", "linear", "dynamic", "ntk_alpha", "yarn")
