"""Video-generation rotation: mrope's cos / sin and rotated q / k equal diffusers' own (diffusers 0.42.1).

The expected values come from diffusers' code, run here:

- Wan 2.x: ``WanRotaryPosEmbed`` (diffusers/models/transformers/transformer_wan.py:354-416) and the
  ``apply_rotary_emb`` nested in ``WanAttnProcessor.__call__`` (:104-115), taken from its code object and
  run as it is (it is not reachable by name);
- HunyuanVideo: ``HunyuanVideoRotaryPosEmbed`` (transformer_hunyuan_video.py:478-508) and
  ``embeddings.apply_rotary_emb`` with ``sequence_dim=1`` (as at :109-110);
- CogVideoX 1.0 and 1.5: ``CogVideoXPipeline._prepare_rotary_positional_embeddings``
  (pipelines/cogvideo/pipeline_cogvideox.py:441-483, which calls ``get_3d_rotary_pos_embed``,
  embeddings.py:635-733) and ``embeddings.apply_rotary_emb`` on ``[B, H, S, D]`` (attention_processor.py:2325).

Tolerances. fp32: cos / sin of integer grids in fp32 (HunyuanVideo, CogVideoX 1.5) are bit for bit
diffusers' (same fp32 ladder, same fp32 product, same torch cos / sin). Wan computes the angle and its cos /
sin in float64 and rounds them to fp32; mrope's ``"exact"`` angle is rounded to fp32 once before fp32 cos /
sin: within 2 fp32 ulps of 1 (2.4e-7). CogVideoX 1.0's crop coordinates: diffusers' fp32 ``torch.linspace``
lands within a few fp32 ulps of the exact coordinates mrope returns (float64); given diffusers' own fp32
grid mrope's cos / sin are bit for bit, and from mrope's grid they differ by at most that position error
times the largest frequency (1). Rotated q / k in fp32: both compute ``x1 cos - x2 sin`` and
``x1 sin + x2 cos`` in fp32 in another operation order: a few fp32 ulps of the inputs (atol 2e-6 for
``randn`` values). bf16: both compute in fp32 and round once to bf16; the fp32 values differ by the fp32
ulps above, which moves the bf16 rounding only where a value lies that close to a rounding midpoint: at
most one bf16 ulp (2^-7 of the larger value; for a value that cancels to near 0, plus the fp32
difference, 2e-6), in under 0.1% of the elements.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from diffusers.models import embeddings
from diffusers.models.transformers import transformer_wan
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed
from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline

import mrope
from mrope.models import video_rope

VAE_SPATIAL = 8  # CogVideoX's VAE: latent rows and columns are pixels / 8 (pipeline_cogvideox.py:213)


def _wan_apply() -> types.FunctionType:
    """Wan's ``apply_rotary_emb`` (transformer_wan.py:104-115), rebuilt from its code object."""
    consts = transformer_wan.WanAttnProcessor.__call__.__code__.co_consts
    (code,) = [c for c in consts if isinstance(c, types.CodeType) and c.co_name == "apply_rotary_emb"]
    return types.FunctionType(code, vars(transformer_wan))


WAN_APPLY = _wan_apply()


def _cog_config(head_dim: int, version: str) -> dict:
    extra = {} if version == "1.0" else {"patch_size_t": 2, "sample_height": 96, "sample_width": 170}
    return {
        "_class_name": "CogVideoXTransformer3DModel",
        "use_rotary_positional_embeddings": True,
        "attention_head_dim": head_dim,
        "patch_size": 2,
        **extra,
    }


def _diffusers_cos_sin(
    config: dict, frames: int, height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, D]`` cos and sin, from the model's own diffusers code, for a latent ``(frames, height, width)``."""
    latent = torch.zeros(1, 1, frames, height, width)
    name = config["_class_name"]
    if name == "WanTransformer3DModel":
        module = transformer_wan.WanRotaryPosEmbed(
            config["attention_head_dim"], tuple(config["patch_size"]), config.get("rope_max_seq_len", 1024)
        )
        cos, sin = module(latent)
        return cos[0, :, 0], sin[0, :, 0]
    if name == "HunyuanVideoTransformer3DModel":
        module = HunyuanVideoRotaryPosEmbed(
            config["patch_size"], config["patch_size_t"], config["rope_axes_dim"], config["rope_theta"]
        )
        return module(latent)
    cfg = {"patch_size_t": None, "sample_height": 60, "sample_width": 90, **config}
    pipe = types.SimpleNamespace(
        vae_scale_factor_spatial=VAE_SPATIAL,
        transformer=types.SimpleNamespace(config=types.SimpleNamespace(**cfg)),
    )
    return CogVideoXPipeline._prepare_rotary_positional_embeddings(
        pipe, height * VAE_SPATIAL, width * VAE_SPATIAL, frames, torch.device("cpu")
    )


def _diffusers_rotate(config: dict, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x ``[B, S, H, D]`` rotated by the model's own apply function (CogVideoX's on ``[B, H, S, D]``)."""
    name = config["_class_name"]
    if name == "WanTransformer3DModel":
        return WAN_APPLY(x, cos[None, :, None], sin[None, :, None])
    if name == "HunyuanVideoTransformer3DModel":
        return embeddings.apply_rotary_emb(x, (cos, sin), sequence_dim=1)
    return embeddings.apply_rotary_emb(x.transpose(1, 2), (cos, sin)).transpose(1, 2)


def _random_latents(seed: int, count: int, patch: tuple[int, int, int], whole: bool = False) -> list:
    """Random latent sizes ``(frames, height, width)``, odd ones included (``whole``: multiples of the
    patch), at least one token per axis, small enough for CPU."""
    rng = np.random.default_rng(seed)
    sizes = [
        [
            p * int(rng.integers(1, m)) + int(rng.integers(0, p)) * (not whole)
            for p, m in zip(patch, (6, 14, 18), strict=True)
        ]
        for _ in range(count)
    ]
    return [tuple(s) for s in sizes]


CONFIGS = {
    "wan": {"_class_name": "WanTransformer3DModel", "attention_head_dim": 128, "patch_size": [1, 2, 2]},
    "hunyuan-video": {
        "_class_name": "HunyuanVideoTransformer3DModel",
        "attention_head_dim": 128,
        "patch_size": 2,
        "patch_size_t": 1,
        "rope_theta": 256.0,
        "rope_axes_dim": [16, 56, 56],
    },
    "cogvideox-1.0": _cog_config(64, "1.0"),
    "cogvideox-1.5": _cog_config(64, "1.5"),
}
CASES = [
    (name, size)
    for i, name in enumerate(CONFIGS)
    for size in _random_latents(i, 3, tuple(video_rope(CONFIGS[name]).patch), name == "cogvideox-1.5")
]


def _fp32_ulps(values: torch.Tensor) -> torch.Tensor:
    return torch.finfo(torch.float32).eps * values.abs().clamp(min=1.0)


@pytest.mark.parametrize(("name", "size"), CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in CASES])
def test_cos_sin_equal_diffusers(name: str, size: tuple[int, int, int]) -> None:
    config = CONFIGS[name]
    rope = video_rope(config)
    cos_d, sin_d = _diffusers_cos_sin(config, *size)
    positions = torch.from_numpy(mrope.latent_positions(rope, *size))
    cos, sin = mrope.cos_sin(positions, rope, angle_precision=rope.angle_precision)
    assert cos.shape == cos_d.shape == (positions.shape[1], rope.head_dim)
    if name == "wan":  # float64 angles in diffusers, one fp32 rounding of the exact angle in mrope
        torch.testing.assert_close(cos, cos_d, rtol=0, atol=2.4e-7)
        torch.testing.assert_close(sin, sin_d, rtol=0, atol=2.4e-7)
    elif name == "cogvideox-1.0":  # diffusers' fp32 linspace grid: within a few fp32 ulps of mrope's
        err = float((positions.float() - positions).abs().max()) + 4 * float(_fp32_ulps(positions).max())
        torch.testing.assert_close(cos, cos_d, rtol=0, atol=err)
        torch.testing.assert_close(sin, sin_d, rtol=0, atol=err)
    else:
        assert torch.equal(cos, cos_d) and torch.equal(sin, sin_d)


def _cog_fp32_grid(rope: mrope.VideoRope, frames: int, height: int, width: int) -> torch.Tensor:
    """CogVideoX 1.0's fp32 grid as diffusers computes it: ``get_3d_rotary_pos_embed``'s linspace lines
    (embeddings.py:670-681) over ``get_resize_crop_region_for_grid`` (pipeline_cogvideox.py:69-84, :459)."""
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

    gh, gw = height // rope.patch[1], width // rope.patch[2]
    (top, left), (bottom, right) = get_resize_crop_region_for_grid(
        (gh, gw), rope.crop_base[1], rope.crop_base[0]
    )
    axes = (
        torch.linspace(0, frames * (frames - 1) / frames, frames, dtype=torch.float32),
        torch.linspace(top, bottom * (gh - 1) / gh, gh, dtype=torch.float32),
        torch.linspace(left, right * (gw - 1) / gw, gw, dtype=torch.float32),
    )
    return torch.stack([m.reshape(-1) for m in torch.meshgrid(*axes, indexing="ij")])


@pytest.mark.parametrize("size", _random_latents(7, 4, (1, 2, 2)), ids=str)
def test_cogvideox_crop_grid(size: tuple[int, int, int]) -> None:
    """Given diffusers' own fp32 crop grid, cos / sin are bit for bit; mrope's float64 grid is within a few
    fp32 ulps of it."""
    config = CONFIGS["cogvideox-1.0"]
    rope = video_rope(config)
    grid = _cog_fp32_grid(rope, *size)
    cos_d, sin_d = _diffusers_cos_sin(config, *size)
    cos, sin = mrope.cos_sin(grid, rope, angle_precision="fp32")
    assert torch.equal(cos, cos_d) and torch.equal(sin, sin_d)
    ours = torch.from_numpy(mrope.latent_positions(rope, *size))
    torch.testing.assert_close(ours, grid.double(), rtol=0, atol=float(4 * _fp32_ulps(grid).max()))


def _assert_rotated_alike(
    ours: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, share: float = 1e-3
) -> None:
    """fp32: within 2e-6; bf16: at most one bf16 ulp of the larger value (plus 2e-6 where a value cancels
    to near 0), in under ``share`` of the elements (see the module docstring)."""
    assert ours.dtype == expected.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(ours, expected, rtol=0, atol=2e-6)
        return
    a, b = ours.float(), expected.float()
    diff = (a - b).abs()
    assert (diff <= 2.0**-7 * torch.maximum(a.abs(), b.abs()) + 2e-6).all()
    assert (diff > 0).float().mean() < share


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("name", "size"), CASES[::2], ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in CASES[::2]]
)
def test_rotated_qk_equal_diffusers(name: str, size: tuple[int, int, int], dtype: torch.dtype) -> None:
    config = CONFIGS[name]
    rope = video_rope(config)
    cos_d, sin_d = _diffusers_cos_sin(config, *size)
    positions = torch.from_numpy(mrope.latent_positions(rope, *size))
    if name == "cogvideox-1.0":  # the rotation on diffusers' own grid (the grid: test_cogvideox_crop_grid)
        positions = _cog_fp32_grid(rope, *size)
    gen = torch.Generator().manual_seed(len(CASES) + size[2])
    n = positions.shape[1]
    q = torch.randn(2, n, 4, rope.head_dim, generator=gen).to(dtype)
    k = torch.randn(2, n, 2, rope.head_dim, generator=gen).to(dtype)
    batch = positions[:, None].expand(3, 2, n)
    q_rot, k_rot = mrope.apply_mrope(q, k, batch, rope, layout="bshd", angle_precision=rope.angle_precision)
    for ours, x in ((q_rot, q), (k_rot, k)):
        expected = _diffusers_rotate(config, x, cos_d, sin_d)
        _assert_rotated_alike(ours, expected, dtype)


SMALL = {  # head dims the interpreter runs quickly; diffusers' functions take them as they are
    "wan": {**CONFIGS["wan"], "attention_head_dim": 24},
    "hunyuan-video": {**CONFIGS["hunyuan-video"], "attention_head_dim": 16, "rope_axes_dim": [4, 6, 6]},
    "cogvideox-1.0": _cog_config(16, "1.0"),
    "cogvideox-1.5": _cog_config(16, "1.5"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", SMALL)
def test_triton_interpreter_equals_diffusers(
    name: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Triton kernel (TRITON_INTERPRET=1) rotates as diffusers does, on a small latent (CogVideoX 1.0:
    on diffusers' fp32 crop grid, float positions)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read at call time
    config = SMALL[name]
    rope = video_rope(config)
    size = (4, 6, 8) if name == "cogvideox-1.5" else (3, 5, 7)
    cos_d, sin_d = _diffusers_cos_sin(config, *size)
    positions = torch.from_numpy(mrope.latent_positions(rope, *size))
    if name == "cogvideox-1.0":
        positions = _cog_fp32_grid(rope, *size)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(positions.shape[1], 2, rope.head_dim, generator=gen).to(dtype)
    k = torch.randn(positions.shape[1], 1, rope.head_dim, generator=gen).to(dtype)
    q_rot, k_rot = mrope.apply_mrope(
        q, k, positions, rope, layout="thd", backend="triton", angle_precision=rope.angle_precision
    )
    for ours, x in ((q_rot, q), (k_rot, k)):
        expected = _diffusers_rotate(config, x[None], cos_d, sin_d)[0]
        _assert_rotated_alike(ours, expected, dtype, share=2e-2)  # < 1,000 elements: one is 0.1%


@pytest.mark.parametrize("name", ["wan", "hunyuan-video", "cogvideox-1.5"])
def test_negative_control_swapped_axis_dims(name: str) -> None:
    """The comparison can fail: the t and h channel counts swapped give other cos values."""
    config = CONFIGS[name]
    rope = video_rope(config)
    t, h, w = rope.axis_dims
    swapped = mrope.VideoRope(**{**rope.__dict__, "axis_dims": (h, t, w)})
    size = (4, 10, 12)
    cos_d, _ = _diffusers_cos_sin(config, *size)
    positions = torch.from_numpy(mrope.latent_positions(swapped, *size))
    cos, _ = mrope.cos_sin(positions, swapped, angle_precision=rope.angle_precision)
    assert (cos - cos_d).abs().max() > 0.1
