"""RopeSpec: presets, the axis map, validation, (de)serialisation, HF configs and scaling parity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mrope import RopeScaling, RopeSpec, SpecError
from mrope.spec import PRESET_NAMES


def test_chunked_axis_map_matches_spec_rule() -> None:
    spec = RopeSpec.preset("qwen2-vl")
    axis = spec.axis_map()
    assert axis.shape == (64,)
    assert (axis[:16] == 0).all() and (axis[16:40] == 1).all() and (axis[40:] == 2).all()


def test_interleaved_axis_map_matches_spec_rule() -> None:
    spec = RopeSpec.preset("qwen3-vl")
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


def test_glm_preset_is_partial_and_adjacent() -> None:
    spec = RopeSpec.preset("glm-4.1v")
    assert (spec.head_dim, spec.rotary_dim, spec.pairing) == (128, 64, "gptj")
    assert spec.mrope_section == (8, 12, 12)


def test_inv_freq_matches_formula() -> None:
    spec = RopeSpec.preset("qwen2-vl")
    i = np.arange(64)
    np.testing.assert_allclose(spec.inv_freq(), 1e6 ** (-2 * i / 128), rtol=1e-15)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mrope_section": (16, 24, 23)}, "sums to 63"),
        ({"rotary_dim": 127}, "rotary_dim must be even"),
        ({"head_dim": 64, "rotary_dim": 128, "mrope_section": (16, 24, 24)}, "must not exceed head_dim"),
        ({"theta": 0.0}, "theta must be"),
        ({"theta": float("nan")}, "theta must be"),
        ({"section_layout": "zigzag"}, "section_layout"),
        ({"pairing": "odd"}, "pairing"),
        ({"mrope_section": (16, 24)}, "three non-negative ints"),
        ({"mrope_section": (0, 40, 24), "section_layout": "interleaved"}, "3*s_h"),
    ],
)
def test_validation_names_field_and_numbers(kwargs: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        RopeSpec(**kwargs)


def test_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        RopeSpec(mrope_section=(1, 2, 3))
    with pytest.raises(SpecError, match="unknown model 'llama'"):
        RopeSpec.preset("llama")


@st.composite
def specs(draw: st.DrawFn) -> RopeSpec:
    s_h = draw(st.integers(0, 12))
    s_w = draw(st.integers(0, 12))
    s_t = draw(st.integers(max(0, max(3 * s_h - 1, 3 * s_w) - s_h - s_w), 30))
    n = s_t + s_h + s_w
    if n < 2:
        s_t, n = s_t + 2 - n, 2
    extra = draw(st.integers(0, 8)) * 2
    kind = draw(st.sampled_from(["none", "linear", "dynamic", "yarn"]))
    scaling = RopeScaling()
    if kind != "none":
        scaling = RopeScaling(
            type=kind,
            factor=draw(st.floats(1.0, 16.0)),
            original_max_position_embeddings=draw(st.integers(128, 1 << 17)),
        )
    return RopeSpec(
        head_dim=2 * n + extra,
        rotary_dim=2 * n,
        theta=draw(st.floats(100.0, 1e8)),
        mrope_section=(s_t, s_h, s_w),
        section_layout=draw(st.sampled_from(["chunked", "interleaved"])),
        pairing=draw(st.sampled_from(["neox", "gptj"])),
        scaling=scaling,
    )


@given(specs())
def test_json_round_trip_is_lossless(spec: RopeSpec) -> None:
    again = RopeSpec.from_json(json.dumps(json.loads(spec.to_json())))
    assert again == spec
    np.testing.assert_array_equal(again.inv_freq(), spec.inv_freq())
    assert np.bincount(spec.axis_map(), minlength=3).tolist() == list(spec.mrope_section)


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


def test_all_presets_exist() -> None:
    assert {"qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"} <= set(PRESET_NAMES)
    for name in PRESET_NAMES:
        assert isinstance(RopeSpec.preset(name), RopeSpec)
    assert torch.tensor(RopeSpec.preset("qwen3-vl").axis_map()).dtype == torch.int64
