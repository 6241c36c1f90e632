"""The processors' resize rules: the size a picture or a video frame is resized to before patching.

The Qwen ``smart_resize`` rule (transformers 5.24 models/qwen2_vl/image_processing_qwen2_vl.py:63), the
qwen-vl-utils video pixel budget (``fetch_video`` in qwen-vl-utils/src/qwen_vl_utils/vision_process.py,
github.com/QwenLM/Qwen3-VL), the clip-bounded rule of transformers' Qwen3-VL / GLM-4.1V video
processors (models/qwen3_vl/video_processing_qwen3_vl.py:75), HY-V4-VL's token-bounded video rule and
GLM-Image's edge-bounded image rule."""

from __future__ import annotations

import math
from numbers import Integral, Real

from mrope._errors import MediaError

MAX_ASPECT_RATIO = 200
"""Longest side over shortest side above which Qwen processors refuse an image."""


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise MediaError(f"{name} must be an int; got {value!r}")
    return int(value)


def _pixels(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise MediaError(f"{name} must be a finite number of pixels > 0; got {value!r}")
    return float(value)


def _check_aspect(height: int, width: int, limit: float) -> None:
    """Refuse a ``height x width`` image (pixels, both positive) whose long side is over ``limit`` times
    its short side, as the processors do."""
    if max(height, width) / min(height, width) > limit:
        raise MediaError(
            f"aspect ratio must be at most {limit}; got {height}x{width} (h x w), ratio "
            f"{max(height, width) / min(height, width):.2f}"
        )


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: float = 56 * 56,
    max_pixels: float = 28 * 28 * 1280,
    *,
    upscale_short_side: bool = False,
) -> tuple[int, int]:
    """The size, in pixels, a Qwen processor resizes an image of ``height x width`` pixels to.

    Each side is rounded to the nearest multiple of ``factor`` (Python ``round``: halves go to even).
    If the area then exceeds ``max_pixels``, ``beta = sqrt(h * w / max_pixels)`` and each side becomes
    ``max(factor, floor(side / beta / factor) * factor)``; if it falls below ``min_pixels``,
    ``beta = sqrt(min_pixels / (h * w))`` and each side becomes ``ceil(side * beta / factor) * factor``.

    Args:
        height, width: source size in pixels (> 0).
        factor: patch size times merge size (28 for Qwen2/2.5-VL and GLM-4.1V, 32 for Qwen3-VL).
        min_pixels, max_pixels: area bounds in pixels.
        upscale_short_side: first, a height below ``factor`` becomes ``factor`` and the width
            ``round(width * factor / height)``; then a width below ``factor`` likewise (PaddleOCR-VL's
            image processor; the aspect ratio is checked after this step).

    Returns:
        ``(resized_height, resized_width)``, both positive multiples of ``factor``.

    Raises:
        MediaError: a non-positive size or bound, ``min_pixels > max_pixels``, or an aspect ratio
            (long side / short side) above 200.

    Examples: ``smart_resize(750, 1000) == (756, 1008)``; ``smart_resize(1080, 1920) == (728, 1316)``.
    """
    height, width, factor = _int(height, "height"), _int(width, "width"), _int(factor, "factor")
    if height < 1 or width < 1:
        raise MediaError(f"image size must be positive; got {height}x{width} (h x w)")
    if factor < 1:
        raise MediaError(f"resize factor must be >= 1; got {factor}")
    lo, hi = _pixels(min_pixels, "min_pixels"), _pixels(max_pixels, "max_pixels")
    if lo > hi:
        raise MediaError(f"min_pixels ({min_pixels}) exceeds max_pixels ({max_pixels})")
    if upscale_short_side:
        if height < factor:
            height, width = factor, round(width * factor / height)
        if width < factor:
            height, width = round(height * factor / width), factor
    _check_aspect(height, width, MAX_ASPECT_RATIO)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > hi:
        beta = math.sqrt(height * width / hi)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < lo:
        beta = math.sqrt(lo / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def video_max_pixels(
    num_frames: int,
    min_pixels: float,
    max_pixels: float,
    total_pixels: float,
    frame_factor: int = 2,
) -> float:
    """The per-frame pixel ceiling qwen-vl-utils gives a video of ``num_frames`` sampled frames:
    ``max(min(max_pixels, total_pixels / num_frames * frame_factor), int(min_pixels * 1.05))``.

    ``total_pixels`` is the budget of the whole clip; ``frame_factor`` is the temporal patch size (2),
    since two frames make one temporal patch.
    """
    n = _int(num_frames, "num_frames")
    if n < 1:
        raise MediaError(f"num_frames must be >= 1; got {n}")
    lo = _pixels(min_pixels, "video min_pixels")
    return max(
        min(
            _pixels(max_pixels, "video max_pixels"),
            _pixels(total_pixels, "video total_pixels") / n * frame_factor,
        ),
        int(lo * 1.05),
    )


def smart_resize_clip(
    num_frames: int,
    height: int,
    width: int,
    temporal_factor: int = 2,
    factor: int = 28,
    min_pixels: float = 112 * 112,
    max_pixels: float = 28 * 28 * 2 * 30000,
) -> tuple[int, int]:
    """The frame size, in pixels, when the pixel bounds limit a whole clip (transformers' Qwen3-VL and
    GLM-4.1V video processors; GLM-4.1V's image processor with ``num_frames = temporal_patch_size``).

    A side shorter than ``factor`` first scales both sides up by ``max(factor / h, factor / w)``
    (truncated to ints). Each side is rounded to a multiple of ``factor`` and the frame count to a
    multiple of ``temporal_factor`` (``t``). If ``t * h * w`` exceeds ``max_pixels``,
    ``beta = sqrt(num_frames * height * width / max_pixels)`` and each side becomes
    ``max(factor, floor(side / beta / factor) * factor)``; below ``min_pixels``,
    ``beta = sqrt(min_pixels / (num_frames * height * width))`` and each side becomes
    ``ceil(side * beta / factor) * factor``.

    Args:
        num_frames: frames in the clip (at least ``temporal_factor``).
        height, width: frame size in pixels.
        temporal_factor: frames per temporal patch.
        factor: patch size times merge size.
        min_pixels, max_pixels: bounds on ``t * h * w``.

    Returns:
        ``(resized_height, resized_width)``.

    Raises:
        MediaError: fewer than ``temporal_factor`` frames, a non-positive size or bound, or an aspect
            ratio above 200.
    """
    n, tf = _int(num_frames, "num_frames"), _int(temporal_factor, "temporal_factor")
    height, width, factor = _int(height, "height"), _int(width, "width"), _int(factor, "factor")
    if tf < 1 or factor < 1:
        raise MediaError(f"temporal_factor and factor must be >= 1; got {tf} and {factor}")
    if n < tf:
        raise MediaError(f"a clip needs at least {tf} frames (one temporal patch); got {n}")
    if height < 1 or width < 1:
        raise MediaError(f"frame size must be positive; got {height}x{width} (h x w)")
    lo, hi = _pixels(min_pixels, "min_pixels"), _pixels(max_pixels, "max_pixels")
    if lo > hi:
        raise MediaError(f"min_pixels ({min_pixels}) exceeds max_pixels ({max_pixels})")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    _check_aspect(height, width, MAX_ASPECT_RATIO)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(n / tf) * tf
    if t_bar * h_bar * w_bar > hi:
        beta = math.sqrt(n * height * width / hi)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < lo:
        beta = math.sqrt(lo / (n * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_tokens(
    num_frames: int,
    height: int,
    width: int,
    factor: int = 32,
    max_pixels: int = 33554432,
    frame_max_pixels: int = 1024 * 1024,
) -> tuple[int, int]:
    """The frame size, in pixels, HY-V4-VL's video processor gives a clip of ``num_frames`` frames of
    ``height x width`` pixels (transformers 5.24 ``HYV4VLVideoProcessor.smart_resize``).

    A frame of ``rows x cols`` merged patches (``factor`` pixels each side) costs ``rows * (cols + 1)``
    tokens, one newline token a row. The result is the largest ``(rows * factor, cols * factor)`` that:

    - never scales up: ``rows <= max(1, height // factor)``, ``cols <= max(1, width // factor)``;
    - keeps one frame within ``frame_max_pixels``: ``rows * cols * factor**2 <= frame_max_pixels``;
    - keeps the clip within the token budget: ``num_frames * rows * (cols + 1) <= max_pixels // factor**2``;
    - stays on the frame's aspect ray: some scale ``s`` has ``rows == floor(s * height / factor)`` (or
      ``rows == 1``: one row takes any narrower width) and ``cols <= floor(s * width / factor)``.

    Row counts are tried from the most down; for each, the widest column count the bounds allow is taken
    if the ray reaches it, that is ``cols >= floor(width * rows / height)`` (for ``rows > 1``) with
    ``cols <= ceil(width * (rows + 1) / height) - 1``. When no row count fits (a budget under one token a
    frame), the frame is one merged patch, ``(factor, factor)``. Frames below ``factor`` are not refused:
    a side below ``factor`` becomes one patch row (or column), ``smart_resize_tokens(10, 20, 1000) ==
    (32, 992)``. Integer arithmetic throughout.

    Args:
        num_frames: sampled frames in the clip (the budget is shared by all of them).
        height, width: frame size in pixels.
        factor: patch size times merge size (32 for HY-V4-VL).
        max_pixels: the clip's budget in pixels; ``max_pixels // factor**2`` tokens (the processor's
            ``size["longest_edge"]``).
        frame_max_pixels: one frame's largest area in pixels (the processor's
            ``max_image_size["longest_edge"]``).

    Returns:
        ``(resized_height, resized_width)``, positive multiples of ``factor``.

    Raises:
        MediaError: a non-positive count, size, factor or budget, or an aspect ratio above 200.

    Examples: ``smart_resize_tokens(30, 1080, 1920) == (768, 1344)`` (the frame cap binds);
    ``smart_resize_tokens(600, 1080, 1920) == (160, 288)`` (the token budget binds).
    """
    n = _int(num_frames, "num_frames")
    height, width, factor = _int(height, "height"), _int(width, "width"), _int(factor, "factor")
    budget_px, frame_px = _int(max_pixels, "max_pixels"), _int(frame_max_pixels, "frame_max_pixels")
    if min(n, height, width, factor, budget_px, frame_px) < 1:
        raise MediaError(
            f"frame count, size, resize factor and pixel budgets must be positive; got {n} frames of "
            f"{height}x{width} (h x w), factor {factor}, max_pixels {budget_px}, frame_max_pixels {frame_px}"
        )
    _check_aspect(height, width, MAX_ASPECT_RATIO)
    most_rows, most_cols = max(1, height // factor), max(1, width // factor)
    tokens = budget_px // (factor * factor)
    for rows in range(most_rows, 0, -1):
        narrowest = 1 if rows == 1 else max(1, width * rows // height)
        widest_on_ray = max(1, -(-width * (rows + 1) // height) - 1)
        cols = min(
            most_cols,
            widest_on_ray,
            tokens // (n * rows) - 1,  # clip budget: n * rows * (cols + 1) tokens
            frame_px // (factor * factor * rows),  # one frame's area
        )
        if cols >= narrowest:
            return rows * factor, cols * factor
    return factor, factor


EDGES_MAX_ASPECT_RATIO = 4
"""Longest side over shortest side above which GLM-Image's image processor refuses an image."""


def smart_resize_edges(
    height: int, width: int, factor: int = 16, min_pixels: int = 512 * 512, max_pixels: int = 2048 * 2048
) -> tuple[int, int]:
    """The size, in pixels, GLM-Image's image processor resizes an image of ``height x width`` pixels to
    (transformers 5.24 ``glm_image`` ``smart_resize``).

    The bounds are edges: ``shortest = int(round(sqrt(min_pixels)))``, ``longest =
    int(round(sqrt(max_pixels)))``. ``scale`` is 1, or ``shortest / min(h, w)`` when the short side is
    below ``shortest``, or ``longest / max(h, w)`` when ``max(h, w) * scale`` then exceeds ``longest``.
    Both sides are halved (``h // 2``, ``w // 2``), and each becomes
    ``max(factor, int(round(side * scale / factor)) * factor)``; if the longer then exceeds ``longest``,
    ``beta = max / longest`` and each becomes ``max(factor, floor(side / beta / factor) * factor)``.

    Args:
        height, width: source size in pixels (each at least ``factor``).
        factor: patch size times merge size (16 for GLM-Image: patch 16, merge 1).
        min_pixels, max_pixels: the squares of the shortest and longest edge, in pixels.

    Returns:
        ``(resized_height, resized_width)``, positive multiples of ``factor``.

    Raises:
        MediaError: a side below ``factor``, an aspect ratio above 4, or a non-positive bound.

    Examples: ``smart_resize_edges(1024, 1024) == (512, 512)``; ``smart_resize_edges(300, 400) == (256, 336)``.
    """
    height, width, factor = _int(height, "height"), _int(width, "width"), _int(factor, "factor")
    if factor < 1:
        raise MediaError(f"resize factor must be >= 1; got {factor}")
    shortest = int(round(math.sqrt(_pixels(min_pixels, "min_pixels"))))
    longest = int(round(math.sqrt(_pixels(max_pixels, "max_pixels"))))
    if height < factor or width < factor:
        raise MediaError(
            f"both sides must be at least the resize factor {factor} px for this model's image processor; "
            f"got {height}x{width} (h x w)"
        )
    _check_aspect(height, width, EDGES_MAX_ASPECT_RATIO)
    scale = 1.0
    if min(height, width) < shortest:
        scale = shortest / min(height, width)
    if max(height, width) * scale > longest:
        scale = longest / max(height, width)
    half_h, half_w = height // 2, width // 2
    h_bar = max(factor, int(round(half_h * scale / factor)) * factor)
    w_bar = max(factor, int(round(half_w * scale / factor)) * factor)
    if max(h_bar, w_bar) > longest:
        beta = max(h_bar, w_bar) / longest
        h_bar = max(factor, int(math.floor(h_bar / beta / factor)) * factor)
        w_bar = max(factor, int(math.floor(w_bar / beta / factor)) * factor)
    return h_bar, w_bar
