"""OmniGen2's rotation: mrope's cos / sin and rotated q / k equal its authors' code on diffusers' functions.

Expected values: OmniGen2 (VectorSpaceLab/OmniGen2 at 0f72fa9) gathers diffusers' float64
``get_1d_rotary_pos_embed`` tables per axis (repo.py:21-41, written out in ``support.omnigen2_ref``) and
rotates q and k ``[B, S, H, D]`` (attention_processor.py:180-193) with its copy of diffusers'
``apply_rotary_emb(..., use_real=False)`` (omnigen2/models/embeddings.py:119-126, the same lines as
diffusers 0.42.1's embeddings.py:1000-1006), run here from diffusers: adjacent channels as one complex
number times the complex128 ``cis`` of the angle, the product in complex128, rounded to q's dtype once.
Positions are the whole sequence's (caption, references, output image: OmniGen2's rule, the builder's
equality to it is tests/models/test_scheme_omnirope_omnigen2.py) on random latent grids.

Tolerances, as Wan's (tests/ops/test_videogen_diffusers.py, whose check this file uses): mrope's
``"exact"`` angle is reduced exactly and rounded to fp32 once before fp32 cos / sin: within 2 fp32 ulps of
1 (2.4e-7) of the float64 values. fp32 rotation: mrope's fp32 arithmetic against the float64 product
rounded once, a few fp32 ulps (atol 2e-6 for ``randn`` values); bf16: at most one bf16 ulp (plus the
fp32 difference where a value cancels to near 0), in under 0.1% of the elements (2% of fewer than 10,000).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers.models.embeddings import apply_rotary_emb
from support.omnigen2_ref import DEFAULT_CONFIG, omnigen2_freqs_cis, omnigen2_positions
from test_videogen_diffusers import _assert_rotated_alike

import mrope
from mrope.models import video_rope

SMALL = {**DEFAULT_CONFIG, "hidden_size": 32, "num_attention_heads": 2, "axes_dim_rope": [4, 6, 6]}
"""A head of 16 channels (t 4, h 6, w 6) for the interpreter; OmniGen2's functions take any split."""


def _sequence(seed: int, patch: int = 2) -> tuple[np.ndarray, int]:
    """OmniGen2's whole-sequence positions for a random caption, 0-3 references and the output image,
    and the caption's length."""
    rng = np.random.default_rng(seed)
    sides = rng.integers(1, 12, size=(4, 2)) * patch
    caption = int(rng.integers(1, 30))
    references = [tuple(int(v) for v in s) for s in sides[: int(rng.integers(0, 4))]]
    output = (int(sides[3, 0]), int(sides[3, 1]))
    return omnigen2_positions(caption, references, output, patch), caption


def _builder(positions: np.ndarray, caption: int, patch: int = 2) -> torch.Tensor:
    """The same sequence from mrope's builder (``omnirope``, unwrapped images, merge size = patch), read
    back from the reference's own images: each run of equal t after the caption is one image."""
    t = positions[0, caption:]
    bounds = np.flatnonzero(np.diff(t)) + 1
    images = np.split(np.arange(t.size), bounds)
    segments: list = [mrope.Text(caption)]
    for idx in images:
        rows, cols = positions[1, caption + idx].max() + 1, positions[2, caption + idx].max() + 1
        segments.append(mrope.Image(grid=(1, int(rows) * patch, int(cols) * patch), wrap=False))
    ids = mrope.build_positions(segments, model="omnirope", rules={"merge_size": patch}).ids
    np.testing.assert_array_equal(ids, positions)
    return torch.from_numpy(ids)


def _expected_cos_sin(positions: torch.Tensor, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """OmniGen2's cos / sin per channel (each pair's value on both of its channels), float64."""
    cis = omnigen2_freqs_cis(positions.numpy(), config["axes_dim_rope"])
    return cis.real.repeat_interleave(2, dim=-1), cis.imag.repeat_interleave(2, dim=-1)


@pytest.mark.parametrize("seed", range(4))
def test_cos_sin_equal_omnigen2(seed: int) -> None:
    rope = video_rope(DEFAULT_CONFIG)
    positions = _builder(*_sequence(seed))
    cos_d, sin_d = _expected_cos_sin(positions, DEFAULT_CONFIG)
    cos, sin = mrope.cos_sin(positions, rope, angle_precision=rope.angle_precision)
    assert cos.shape == cos_d.shape == (positions.shape[1], 96)
    torch.testing.assert_close(cos, cos_d.float(), rtol=0, atol=2.4e-7)
    torch.testing.assert_close(sin, sin_d.float(), rtol=0, atol=2.4e-7)


def _rotate_both(config: dict, seed: int, dtype: torch.dtype, backend: str, layout: str) -> None:
    rope = video_rope(config)
    positions = _builder(*_sequence(seed))
    cis = omnigen2_freqs_cis(positions.numpy(), config["axes_dim_rope"])
    n, gen = positions.shape[1], torch.Generator().manual_seed(seed)
    q = torch.randn(1, n, 4, rope.head_dim, generator=gen).to(dtype)  # OmniGen2's [B, S, H, D]
    k = torch.randn(1, n, 2, rope.head_dim, generator=gen).to(dtype)  # its GQA key heads
    if layout == "thd":
        q_rot, k_rot = mrope.apply_mrope(
            q[0], k[0], positions, rope, backend=backend, angle_precision=rope.angle_precision
        )
        q_rot, k_rot = q_rot[None], k_rot[None]
    else:
        q_rot, k_rot = mrope.apply_mrope(
            q,
            k,
            positions[:, None],
            rope,
            layout="bshd",
            backend=backend,
            angle_precision=rope.angle_precision,
        )
    for ours, x in ((q_rot, q), (k_rot, k)):
        expected = apply_rotary_emb(x, cis[None], use_real=False)
        _assert_rotated_alike(ours, expected, dtype, share=1e-3 if x.numel() >= 10_000 else 2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("seed", range(3))
def test_rotated_qk_equal_omnigen2(seed: int, dtype: torch.dtype) -> None:
    _rotate_both(DEFAULT_CONFIG, seed, dtype, "torch", "bshd")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_triton_interpreter_equals_omnigen2(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Triton kernel (TRITON_INTERPRET=1) rotates as OmniGen2 does, on a small head."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read at call time
    _rotate_both(SMALL, 5, dtype, "triton", "thd")


def test_negative_controls() -> None:
    """The comparison can fail: Wan's split of a 96-channel head (t 32, h 32, w 32 -> t 40, h 28, w 28) and
    an output image one further on t give other values."""
    rope = video_rope(DEFAULT_CONFIG)
    positions = _builder(*_sequence(1))
    cos_d, _ = _expected_cos_sin(positions, DEFAULT_CONFIG)
    wan_split = mrope.VideoRope(**{**rope.__dict__, "axis_dims": (40, 28, 28)})
    cos, _ = mrope.cos_sin(positions, wan_split, angle_precision="exact")
    assert (cos - cos_d).abs().max() > 0.1
    shifted = positions.clone()
    shifted[0, shifted[0] == shifted[0, -1]] += 1
    cos, _ = mrope.cos_sin(shifted, rope, angle_precision="exact")
    assert (cos - cos_d).abs().max() > 0.1
