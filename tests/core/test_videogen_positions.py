"""mrope.latent_positions and mrope.VideoRope: a video-generation latent's (t, h, w) token positions.

Expected values: the grids diffusers 0.42.1 builds, written out here from its lines (and its own crop-region
function, run): HunyuanVideo's ``arange`` per axis, ``meshgrid(indexing="ij")``, flattened
(transformer_hunyuan_video.py:489-499; Wan's tables are expanded in the same t-major order,
transformer_wan.py:398-413); CogVideoX 1.0's crop region (``get_resize_crop_region_for_grid``,
pipelines/cogvideo/pipeline_cogvideox.py:69-84) and ``linspace`` coordinates (embeddings.py:669-681), here in
float64; CogVideoX 1.5's ``arange`` within the base grid (embeddings.py:682-687, 726-729).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

import mrope
from mrope import LayoutError, SpecError, VideoRope
from mrope._latent_positions import _crop_region

WAN = VideoRope(
    model="wan",
    head_dim=128,
    axis_dims=(44, 42, 42),
    theta=1e4,
    patch=(1, 2, 2),
    freq_dtype="float64",
    max_grid=1024,
)
HUNYUAN = VideoRope(model="hunyuan-video", head_dim=128, axis_dims=(16, 56, 56), theta=256.0, patch=(1, 2, 2))
COG10 = VideoRope(
    model="cogvideox", head_dim=64, axis_dims=(16, 24, 24), theta=1e4, patch=(1, 2, 2), crop_base=(30, 45)
)
COG15 = VideoRope(
    model="cogvideox",
    head_dim=64,
    axis_dims=(16, 24, 24),
    theta=1e4,
    patch=(2, 2, 2),
    max_hw=(48, 85),
    whole_patches=True,
)


def _index_grid(t: int, h: int, w: int) -> np.ndarray:
    """HunyuanVideo's grid (transformer_hunyuan_video.py:491-499): ``arange`` per axis, ``meshgrid`` ij."""
    mesh = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh])


def _latents(seed: int, patch: tuple[int, int, int], whole: bool = False) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    return [
        tuple(p * int(rng.integers(1, 12)) + (0 if whole else int(rng.integers(0, p))) for p in patch)
        for _ in range(6)
    ]


@pytest.mark.parametrize("rope", [WAN, HUNYUAN, COG15], ids=lambda r: f"{r.model}-{r.patch}")
def test_index_grids(rope: VideoRope) -> None:
    for frames, height, width in _latents(len(rope.model), rope.patch, rope.whole_patches):
        got = mrope.latent_positions(rope, frames, height, width)
        pt, ph, pw = rope.patch
        expected = _index_grid(frames // pt, height // ph, width // pw)
        assert got.dtype == np.int64 and np.array_equal(got, expected)


def test_crop_region_equals_diffusers() -> None:
    """Every grid up to 40 x 60 tokens in the default base grid (30, 45) and one other: equal regions
    (Python's round, halves to even, as diffusers)."""
    for base in ((30, 45), (48, 85)):
        for h, w in itertools.product(range(1, 41), range(1, 61)):
            assert _crop_region((h, w), base) == get_resize_crop_region_for_grid((h, w), base[1], base[0])


def _crop_grid(frames: int, gh: int, gw: int, base: tuple[int, int]) -> np.ndarray:
    """CogVideoX 1.0's coordinates in float64 (embeddings.py:672-681 with pipeline_cogvideox.py:459)."""
    (top, left), (bottom, right) = get_resize_crop_region_for_grid((gh, gw), base[1], base[0])
    axes = (
        np.linspace(0, frames * (frames - 1) / frames, frames),
        np.linspace(top, bottom * (gh - 1) / gh, gh),
        np.linspace(left, right * (gw - 1) / gw, gw),
    )
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh])


def test_cogvideox_crop_coordinates() -> None:
    for frames, height, width in [*_latents(3, (1, 2, 2)), (13, 60, 90), (13, 60, 80), (1, 2, 2)]:
        got = mrope.latent_positions(COG10, frames, height, width)
        expected = _crop_grid(frames, height // 2, width // 2, COG10.crop_base)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_negative_control_crop_is_not_the_index_grid() -> None:
    """The comparison can fail: a grid off the base grid's aspect gets offset, stretched coordinates."""
    got = mrope.latent_positions(COG10, 3, 60, 80)  # 30 x 40 tokens in a 30 x 45 base: w starts at 2
    assert not np.allclose(got, _index_grid(3, 30, 40))
    assert got[2, 0] == 2.0


@pytest.mark.parametrize(
    ("rope", "size", "message"),
    [
        (WAN, (0, 4, 4), "positive ints"),
        (WAN, (2, 4.0, 4), "positive ints"),
        (WAN, (2, 1, 4), "no token on some axis"),
        (VideoRope(**{**WAN.__dict__, "max_grid": 4}), (2, 10, 4), "rotary rows for 4 tokens"),
        (COG15, (3, 4, 4), "whole patches"),
        (COG15, (2, 98, 4), "within its base token grid"),
    ],
)
def test_latent_errors(rope: VideoRope, size: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        mrope.latent_positions(rope, *size)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"axis_dims": (44, 42, 41)}, "even channel counts"),
        ({"axis_dims": (44, 42, 40)}, "summing to head_dim 128"),
        ({"axis_dims": (64, 64)}, "3 positive ints"),
        ({"theta": 0}, "theta"),
        ({"theta": float("inf")}, "theta"),
        ({"patch": (1, 0, 2)}, "patch"),
        ({"freq_dtype": "float16"}, "freq_dtype"),
        ({"crop_base": (30, 45), "max_hw": (30, 45)}, "not both"),
        ({"max_grid": 0}, "max_grid"),
        ({"whole_patches": 1}, "whole_patches"),
    ],
)
def test_video_rope_errors(changes: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        VideoRope(**{**WAN.__dict__, **changes})


def test_angle_precision() -> None:
    assert WAN.angle_precision == "exact"
    assert HUNYUAN.angle_precision == "fp32"
