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
from support.hf_reference import hy_v4_vl_apply
from transformers.models.glm4v import modeling_glm4v
from transformers.models.glm4v.configuration_glm4v import Glm4vTextConfig
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
from transformers.models.qwen3_vl import modeling_qwen3_vl
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

from mrope import RopeSpec
from mrope.models import get_family
from mrope.ops import apply_mrope, cos_sin
from mrope.ops._freqs import hf_inv_freq_fp32

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
        get_family("qwen2-vl").spec,
    ),
    "qwen2.5-vl": (
        Qwen2_5_VLTextConfig,
        modeling_qwen2_5_vl.Qwen2_5_VLRotaryEmbedding,
        modeling_qwen2_5_vl.apply_rotary_pos_emb,
        {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        get_family("qwen2.5-vl").spec,
    ),
    "qwen3-vl": (
        Qwen3VLTextConfig,
        modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding,
        modeling_qwen3_vl.apply_rotary_pos_emb,
        {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True},
        get_family("qwen3-vl").spec,
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
        get_family("glm-4.1v").spec,
    ),
}

_QWEN2 = get_family("qwen2-vl").spec
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
    _assert_rotates_like(q, k, pos, spec, (cos, sin, q_hf, k_hf), backend)
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
        _assert_rotates_like(q, k, pos, spec, (cos, sin, q_hf, k_hf), backend, atol=3e-6)


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


# ---------------------------------------------------------------- the families with their own rotary forms
# Each family's own rotary class from transformers 5.24 (or, for HunyuanOCR, Tencent's official layout
# written out here), on random positions with distinct axes, against apply_mrope with the spec that family's
# checkpoint needs. fp32 angles: cos/sin are transformers' own, so the rotations agree to fp32 rounding.


def _assert_rotates_like(
    q: torch.Tensor,
    k: torch.Tensor,
    pos: torch.Tensor,
    spec: RopeSpec,
    own: tuple[torch.Tensor, ...],
    backend: str,
    atol: float = 2e-6,
) -> None:
    """mrope's cos/sin tables equal the family's own ``(cos, sin)`` bit for bit, and ``apply_mrope`` gives
    its rotated ``(q, k)`` within ``atol``; ``own`` is ``(cos, sin, q, k)`` from transformers."""
    cos, sin, want_q, want_k = own
    ours_cos, ours_sin = cos_sin(pos, spec, layout="bhsd")
    assert torch.equal(ours_cos, cos) and torch.equal(ours_sin, sin)
    got_q, got_k = apply_mrope(q, k, pos, spec, layout="bhsd", backend=backend)
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=atol)
    torch.testing.assert_close(got_k, want_k, rtol=0, atol=atol)


def _family_inputs(axes: int, head_dim: int, b: int = 2, s: int = 7, high: int = 3000, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, 3, s, head_dim, generator=g)
    k = torch.randn(b, 1, s, head_dim, generator=g)
    pos = torch.randint(0, high, (axes, b, s), generator=g)
    return q, k, pos


def _ernie_spec() -> RopeSpec:
    return RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=5e5,
        mrope_section=(20, 22, 22),
        section_layout="hw_alternating",
        pairing="gptj",
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_ernie_4_5_vl_rotary_matches_transformers(backend: str) -> None:
    """Ernie4_5_VLMoeTextRotaryEmbedding stores inv_freq pre-permuted (h freqs 0,2,..,42, then w freqs
    1,3,..,43, then t 44..63) and recomposes cos/sin so that frequency k sits at channels (2k, 2k+1) again:
    the hw_alternating map with natural frequencies, gptj pairs."""
    from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as m
    from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeTextConfig,
    )

    config = Ernie4_5_VLMoeTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters={"rope_type": "default", "rope_theta": 5e5, "mrope_section": [22, 22, 20]},
    )
    emb = m.Ernie4_5_VLMoeTextRotaryEmbedding(config)
    q, k, pos = _family_inputs(3, 128)
    cos, sin = emb(q, pos)
    want_q, want_k = m.apply_rotary_pos_emb(q, k, cos, sin)
    spec = _ernie_spec()
    _assert_rotates_like(q, k, pos, spec, (cos, sin, want_q, want_k), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inplace", (False, True))
def test_hy_v4_vl_rotary_on_trailing_slice_matches_transformers(backend: str, inplace: bool) -> None:
    """HY-V4-VL: interleaved [12, 10, 10] on a 64-channel rope slice (cos first half repeat_interleave(2):
    gptj), the slice at the END of a 256-channel MLA head (``q_pass, q_rot = split(q, [192, 64])``);
    transformers 5.25 writes the rotated slice in another channel order (``hy_v4_vl_apply``)."""
    from transformers.models.hy_v4_vl import modeling_hy_v4_vl as m
    from transformers.models.hy_v4_vl.configuration_hy_v4_vl import HYV4VLTextConfig

    config = HYV4VLTextConfig(rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    assert config.head_dim == 64 and config.rope_parameters["mrope_section"] == [12, 10, 10]
    emb = m.HYV4VLRotaryEmbedding(config)
    q, k, pos = _family_inputs(3, 256)
    cos, sin = emb(q, pos)
    q_pass, q_rot = torch.split(q, [192, 64], dim=-1)
    k_pass, k_rot = torch.split(k, [192, 64], dim=-1)
    q_rot, k_rot = hy_v4_vl_apply(q_rot, k_rot, cos, sin)
    want_q, want_k = torch.cat([q_pass, q_rot], dim=-1), torch.cat([k_pass, k_rot], dim=-1)
    spec = RopeSpec(
        head_dim=256,
        rotary_dim=64,
        theta=1e4,
        mrope_section=(12, 10, 10),
        section_layout="interleaved",
        pairing="gptj",
        rotary_offset=192,
    )
    got_q, got_k = apply_mrope(
        q.clone(), k.clone(), pos, spec, layout="bhsd", backend=backend, inplace=inplace
    )
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=2e-6)
    torch.testing.assert_close(got_k, want_k, rtol=0, atol=2e-6)
    assert torch.equal(got_q[..., :192], q[..., :192])


def _hunyuan_official(q, k, pos, inv_freq, section):
    """Tencent's apply_rotary_pos_emb_xdrope (HunyuanOCR release), written out: cos/sin = cat(f, f) of every
    axis, split by ``xdrope_section * 2`` (list repetition), chunk i from axis i % A, then rotate_half."""
    freqs = pos[..., None].float() * inv_freq  # [A, B, S, F]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    sizes = list(section) * 2
    a = len(section)
    cos = torch.cat([m[i % a] for i, m in enumerate(cos.split(sizes, dim=-1))], dim=-1)[:, None]
    sin = torch.cat([m[i % a] for i, m in enumerate(sin.split(sizes, dim=-1))], dim=-1)[:, None]

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.mark.parametrize("backend", BACKENDS)
def test_hunyuan_ocr_four_axes_ntk_alpha_matches_official_layout(backend: str) -> None:
    """HunyuanOCR: 4 axes [16, 16, 16, 16] chunked (the official xdrope layout; 5.24's cat(f, f) split,
    transformers 5.24 models/hunyuan_vl/modeling_hunyuan_vl.py:181-190, is not a rotation), NTK-alpha 1000:
    inv_freq bit-identical to transformers' compute_ntk_alpha_rope_parameters."""
    from transformers.models.hunyuan_vl import modeling_hunyuan_vl as m
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLTextConfig

    section = [16, 16, 16, 16]
    config = HunYuanVLTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters={
            "rope_type": "dynamic",
            "rope_theta": 1e4,
            "alpha": 1000.0,
            "factor": 1.0,
            "mrope_section": section,
        },
    )
    emb = m.HunYuanVLRotaryEmbedding(config)
    assert emb.rope_type == "ntk_alpha"
    spec = RopeSpec(head_dim=128, rotary_dim=128, theta=1e4, mrope_section=tuple(section)).with_scaling(
        type="ntk_alpha", alpha=1000.0
    )
    assert torch.equal(emb.inv_freq, hf_inv_freq_fp32(spec))
    q, k, pos = _family_inputs(4, 128)
    want_q, want_k = _hunyuan_official(q, k, pos, emb.inv_freq, section)
    got_q, got_k = apply_mrope(q, k, pos, spec, layout="bhsd", backend=backend)
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=2e-6)
    torch.testing.assert_close(got_k, want_k, rtol=0, atol=2e-6)
    # for text (all four axes equal) 5.24's layout and the official one agree: plain RoPE
    text = pos[:1].expand(4, -1, -1)
    cos, sin = emb(q, text)
    hf_q, _ = m.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(
        apply_mrope(q, k, text, spec, layout="bhsd", backend=backend)[0], hf_q, rtol=0, atol=2e-6
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_qwen3_omni_float_positions_match_transformers(backend: str) -> None:
    """Qwen3-Omni keeps fractional float32 time; its thinker rotary multiplies float positions by inv_freq
    in fp32 (interleaved [24, 20, 20])."""
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as m
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeTextConfig

    config = Qwen3OmniMoeTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    )
    emb = m.Qwen3OmniMoeThinkerTextRotaryEmbedding(config)
    q, k, pos = _family_inputs(3, 128)
    pos = pos.float() * (2 / 13) * 13 / 3.7  # fractional float32 positions
    cos, sin = emb(q, pos)
    want_q, want_k = m.apply_rotary_pos_emb(q, k, cos, sin)
    spec = RopeSpec(
        head_dim=128, rotary_dim=128, theta=1e6, mrope_section=(24, 20, 20), section_layout="interleaved"
    )
    _assert_rotates_like(q, k, pos, spec, (cos, sin, want_q, want_k), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_qwen4_exp_short_sections_match_transformers(backend: str) -> None:
    """qwen4_exp's class config has no partial factor: 256 rotary channels, 128 frequencies, and its
    interleaved [11, 11, 10] reaches only frequencies < 33; the rest stay on t (Qwen4ExpTextRotaryEmbedding,
    transformers 5.24)."""
    from transformers.models.qwen4_exp import modeling_qwen4_exp as m
    from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig

    config = Qwen4ExpTextConfig(
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "mrope_section": [11, 11, 10]}
    )
    assert config.head_dim == 256
    emb = m.Qwen4ExpTextRotaryEmbedding(config)
    q, k, pos = _family_inputs(3, 256)
    cos, sin = emb(q, pos)
    want_q, want_k = m.apply_rotary_pos_emb(q, k, cos, sin)
    spec = RopeSpec(
        head_dim=256, rotary_dim=256, theta=1e7, mrope_section=(11, 11, 10), section_layout="interleaved"
    )
    _assert_rotates_like(q, k, pos, spec, (cos, sin, want_q, want_k), backend)
