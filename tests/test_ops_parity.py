"""Parity of mrope.ops with transformers' own rotary code (small configs built here, no hub access).

transformers 5 moved the M-RoPE section selection out of ``apply_multimodal_rotary_pos_emb`` into the
rotary embedding classes (``Qwen2VLRotaryEmbedding.recomposition_frequencies``: chunked;
``Qwen3VLTextRotaryEmbedding``: interleaved, the former ``apply_interleaved_mrope``), which now return
``[B, S, head_dim]`` cos/sin for the model's ``apply_rotary_pos_emb``. Those two steps are the reference
here. With ``angle_precision="fp32"`` the angles, inv_freq and cos/sin agree bit for bit; the rotated
fp32 tensors agree to an fp32 rounding or two.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.glm4v import modeling_glm4v
from transformers.models.glm4v.configuration_glm4v import Glm4vTextConfig
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
from transformers.models.qwen3_vl import modeling_qwen3_vl
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

from mrope import RopeSpec
from mrope.ops import apply_mrope, cos_sin
from mrope.ops.freqs import hf_inv_freq_fp32

BACKENDS = ("torch", "triton")
MAX_POS = 256  # the configs' max_position_embeddings (= dynamic NTK's original length)


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _config(cls, rope_parameters: dict, max_pos: int = MAX_POS):
    return cls(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters=rope_parameters,
        max_position_embeddings=max_pos,
    )


# name -> (config class, rotary class, apply fn, rope_parameters, spec)
MODELS = {
    "qwen2-vl": (
        Qwen2VLTextConfig,
        modeling_qwen2_vl.Qwen2VLRotaryEmbedding,
        modeling_qwen2_vl.apply_rotary_pos_emb,
        {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        RopeSpec.preset("qwen2-vl"),
    ),
    "qwen2.5-vl": (
        Qwen2_5_VLTextConfig,
        modeling_qwen2_5_vl.Qwen2_5_VLRotaryEmbedding,
        modeling_qwen2_5_vl.apply_rotary_pos_emb,
        {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        RopeSpec.preset("qwen2.5-vl"),
    ),
    "qwen3-vl": (
        Qwen3VLTextConfig,
        modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding,
        modeling_qwen3_vl.apply_rotary_pos_emb,
        {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True},
        RopeSpec.preset("qwen3-vl"),
    ),
    "glm-4.1v": (
        Glm4vTextConfig,
        modeling_glm4v.Glm4vTextRotaryEmbedding,
        modeling_glm4v.apply_rotary_pos_emb,
        {
            "rope_type": "default",
            "rope_theta": 1e4,
            "mrope_section": [8, 12, 12],
            "partial_rotary_factor": 0.5,
        },
        RopeSpec.preset("glm-4.1v"),
    ),
}

_QWEN2 = RopeSpec.preset("qwen2-vl")
SCALED = {
    "linear": ({"rope_type": "linear", "factor": 4.0}, _QWEN2.with_scaling(type="linear", factor=4.0)),
    "dynamic": (
        {"rope_type": "dynamic", "factor": 2.0},
        _QWEN2.with_scaling(type="dynamic", factor=2.0, original_max_position_embeddings=MAX_POS),
    ),
    "yarn": (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        _QWEN2.with_scaling(type="yarn", factor=4.0, original_max_position_embeddings=64),
    ),
}


def _inputs(dtype=torch.float32, b=2, s=7, high=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, 3, s, 128, generator=g).to(dtype)
    k = torch.randn(b, 1, s, 128, generator=g).to(dtype)
    pos = torch.randint(0, high, (3, b, s), generator=g)
    return q, k, pos


def _hf(name: str, q, k, pos, rope_parameters=None):
    cls, rotary, apply, params, _ = MODELS[name]
    emb = rotary(_config(cls, rope_parameters or params))
    cos, sin = emb(q, pos)
    q_hf, k_hf = apply(q, k, cos, sin)
    return q_hf, k_hf, cos, sin, emb


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_rotation_matches_transformers_fp32(name: str, backend: str) -> None:
    spec = MODELS[name][4]
    q, k, pos = _inputs()
    q_hf, k_hf, cos, sin, emb = _hf(name, q, k, pos)
    assert torch.equal(emb.inv_freq, hf_inv_freq_fp32(spec))
    ours_cos, ours_sin = cos_sin(pos, spec, layout="bhsd")
    assert torch.equal(ours_cos, cos) and torch.equal(ours_sin, sin)
    q_ours, k_ours = apply_mrope(q, k, pos, spec, layout="bhsd", backend=backend)
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=2e-6)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=2e-6)
    # the same through the thd layout of a serving engine: batch row 1 flattened
    q_t, k_t = apply_mrope(
        q[1].transpose(0, 1), k[1].transpose(0, 1), pos[:, 1], spec, layout="thd", backend=backend
    )
    torch.testing.assert_close(q_t, q_hf[1].transpose(0, 1), rtol=0, atol=2e-6)
    torch.testing.assert_close(k_t, k_hf[1].transpose(0, 1), rtol=0, atol=2e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scaling", sorted(SCALED))
def test_scaled_rotation_matches_transformers(scaling: str, backend: str) -> None:
    params, spec = SCALED[scaling]
    rope_parameters = {"rope_theta": 1e6, "mrope_section": [16, 24, 24], **params}
    for high in (MAX_POS // 2, 20 * MAX_POS):  # dynamic NTK: below and beyond the original length
        q, k, pos = _inputs(high=high)
        q_hf, k_hf, cos, sin, emb = _hf("qwen2-vl", q, k, pos, rope_parameters)
        assert torch.equal(emb.inv_freq, hf_inv_freq_fp32(spec, pos.max()))
        assert emb.attention_scaling == pytest.approx(spec.attention_factor(), rel=1e-15)
        ours_cos, ours_sin = cos_sin(pos, spec, layout="bhsd")
        assert torch.equal(ours_cos, cos) and torch.equal(ours_sin, sin)
        q_ours, k_ours = apply_mrope(q, k, pos, spec, layout="bhsd", backend=backend)
        torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=3e-6)
        torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=3e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ("qwen2-vl", "qwen3-vl"))
def test_bf16_close_to_transformers_and_closer_to_float64(name: str, backend: str) -> None:
    """transformers rounds cos/sin and every product to bf16; mrope rounds once, so it is at least as close
    to the float64 rotation (of the same fp32 angles)."""
    spec = MODELS[name][4]
    q, k, pos = _inputs(dtype=torch.bfloat16, high=500)
    q_hf, _, _, _, _ = _hf(name, q, k, pos)
    q_ours, _ = apply_mrope(q, k, pos, spec, layout="bhsd", backend=backend)
    cos64, sin64 = (t.double()[:, None] for t in cos_sin(pos, spec, layout="bhsd"))
    x = q.double()
    half = x.shape[-1] // 2
    want = x * cos64 + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin64
    err_ours = float((q_ours.double() - want).abs().max())
    err_hf = float((q_hf.double() - want).abs().max())
    assert err_ours <= err_hf
    assert err_ours <= 2**-8 * float(want.abs().max())
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=4 * 2**-8 * float(want.abs().max()))


def test_text_positions_match_transformers_text_path() -> None:
    """1-D position ids, which transformers expands to three equal rows, give the same result."""
    spec = MODELS["qwen2-vl"][4]
    q, k, pos = _inputs()
    text = pos[0]
    q_hf, k_hf, _, _, _ = _hf("qwen2-vl", q, k, text.expand(3, *text.shape))
    q_ours, k_ours = apply_mrope(q, k, text, spec, layout="bhsd")
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=2e-6)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=2e-6)
