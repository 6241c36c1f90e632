"""The (t, h, w) positions of a video-generation latent's tokens, as its transformer numbers them.

A latent ``[C, frames, height, width]`` becomes ``T * H * W`` tokens, ``(T, H, W) = (frames // p_t,
height // p_h, width // p_w)`` (the patch embedding's stride, :attr:`mrope.VideoRope.patch`), in t-major
order (t, then h, then w: the order of diffusers' ``flatten(2)`` of the patch embedding and of its rotary
tables, transformer_wan.py:405-413, transformer_hunyuan_video.py:496-506, embeddings.py:703-719 of
diffusers 0.42.1). Wan and HunyuanVideo count every axis 0, 1, 2, ...; so does CogVideoX 1.5
(``grid_type="slice"``, embeddings.py:682-687, 726-729), within its base grid; CogVideoX 1.0 fits the grid
into its base grid (pipelines/cogvideo/pipeline_cogvideox.py:69-84, 448-468) and takes evenly spaced
float coordinates over the crop (embeddings.py:669-681).
"""

from __future__ import annotations

import numpy as np

from mrope._errors import LayoutError
from mrope._video_rope import VideoRope


def _crop_region(grid: tuple[int, int], base: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((top, left), (bottom, right))``: the grid resized into ``base`` (rows, cols) keeping its aspect,
    centred (diffusers' ``get_resize_crop_region_for_grid``, pipeline_cogvideox.py:69-84; Python's
    ``round``, halves to even, as there)."""
    h, w = grid
    th, tw = base
    if h / w > th / tw:
        rh, rw = th, int(round(th / h * w))
    else:
        rw, rh = tw, int(round(tw / w * h))
    top, left = int(round((th - rh) / 2.0)), int(round((tw - rw) / 2.0))
    return (top, left), (top + rh, left + rw)


def _linspace(start: float, stop: float, n: int) -> np.ndarray:
    """``n`` evenly spaced float64 values from ``start`` to ``stop`` (both included; ``[start]`` for one)."""
    if n == 1:
        return np.array([float(start)])
    return start + np.arange(n, dtype=np.float64) * ((stop - start) / (n - 1))


def _axes(rope: VideoRope, grid: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, h, w = grid
    if rope.crop_base is None:
        return np.arange(t), np.arange(h), np.arange(w)
    (top, left), (bottom, right) = _crop_region((h, w), rope.crop_base)
    return (
        _linspace(0.0, t * (t - 1) / t, t),
        _linspace(top, bottom * (h - 1) / h, h),
        _linspace(left, right * (w - 1) / w, w),
    )


def latent_positions(rope: VideoRope, frames: int, height: int, width: int) -> np.ndarray:
    """The positions of a latent's tokens for :func:`mrope.apply_mrope`: ``[3, T * H * W]`` (rows t, h, w).

    Args:
        rope: the transformer's rotary side (:func:`mrope.models.video_rope`).
        frames, height, width: the latent's size the transformer takes (latent frames, rows, columns, before
            its patch embedding); a CogVideoX 1.5 latent's are multiples of its patch (its pipeline pads
            the frames, pipeline_cogvideox.py:684-687).

    Returns:
        int64 ``[3, N]`` token counts from 0; for a CogVideoX 1.0 rope (``crop_base``) float64 ``[3, N]``:
        evenly spaced coordinates over the crop region, within a few float64 ulps of the exact values
        (diffusers computes them with fp32 ``torch.linspace``, which lands within a few fp32 ulps of them:
        one, 3.8e-6, at the default base grid's 45 columns, measured on CPU). ``N = T * H * W``, t-major.

    Raises:
        LayoutError: a size that is not a positive int, a latent with no token on some axis, a latent
            that is not whole patches where the model needs them, or more tokens on an axis than the model
            has rotary rows for.
    """
    sizes = (frames, height, width)
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise LayoutError(f"latent frames, height and width must be positive ints; got {sizes!r}")
    if rope.whole_patches and any(int(s) % p for s, p in zip(sizes, rope.patch, strict=True)):
        raise LayoutError(
            f"{rope.model} reshapes the latent into whole patches (p_t, p_h, p_w) {rope.patch}; got a latent "
            f"of (frames, height, width) {sizes}"
        )
    grid = tuple(int(s) // p for s, p in zip(sizes, rope.patch, strict=True))
    if min(grid) == 0:
        raise LayoutError(
            f"a latent of (frames, height, width) {sizes} has no token on some axis at {rope.model}'s patch "
            f"(p_t, p_h, p_w) {rope.patch}: token grid {grid}"
        )
    if rope.max_grid is not None and max(grid) > rope.max_grid:
        raise LayoutError(
            f"{rope.model} has rotary rows for {rope.max_grid} tokens per axis; the latent's token grid "
            f"(t, h, w) is {grid}"
        )
    if rope.max_hw is not None and (grid[1] > rope.max_hw[0] or grid[2] > rope.max_hw[1]):
        raise LayoutError(
            f"{rope.model} counts h and w within its base token grid (rows, cols) {rope.max_hw}; the "
            f"latent's token grid (t, h, w) is {grid}"
        )
    t, h, w = _axes(rope, grid)
    mesh = np.meshgrid(t, h, w, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh])
