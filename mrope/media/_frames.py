"""A video given as a list of frame images, sized as the route's pipeline sizes one.

Under every route each frame is read from its header (orientation as the route's image loader gives
it), the list is padded with its last frame to a multiple of the temporal patch, and the frames must
resize to one size (the processor stacks them). The routes differ in how a frame is sized and timed
(:mod:`mrope.models._routes`):

- ``"processor"`` / ``"vllm"``: each frame as :func:`mrope.media.load_image` sizes an image (the item's
  ``min_pixels`` / ``max_pixels`` / ``resized``, else the image bounds), timed by the item's ``fps``
  (default the rules').
- ``"qwen-vl-utils"`` (0.0.14 ``fetch_video`` with a list under ``"video"``, ``vision_process.py:417-481``):
  each frame first by ``fetch_image`` at twice the resize factor (the item's ``min_pixels`` /
  ``max_pixels`` or 4 .. 16384 tokens of that factor; ``resized`` under those defaults), then the stack
  again at the resize factor under the video bounds (:func:`mrope.media._resize.video_max_pixels`'s
  per-frame budget for the padded count, capped by the item's ``max_pixels``; ``resized`` under the
  image bounds), timed by ``sample_fps`` (default 2.0; ``fps`` is not read).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._errors import MediaError
from mrope._route import Route
from mrope._rules import LayoutRules
from mrope._segments import Video
from mrope.media._image import image_size, load_image
from mrope.media._memory import frame_list
from mrope.media._resize import smart_resize, video_max_pixels
from mrope.media._routes import route_video_rules
from mrope.media._sources import media_record
from mrope.models import ModelLike, resolve_rules
from mrope.models._registry import get_route


def _prescaled(
    src: Any, lay: LayoutRules, route: Route, min_pixels: int | None, max_pixels: int | None, resized: Any
) -> tuple[int, int]:
    """One frame's ``(height, width)`` after the route's first resize at ``frame_prescale x`` the factor."""
    factor = lay.resize_factor * route.frame_prescale
    low, high = (t * factor * factor for t in route.frame_prescale_tokens)
    if resized is not None:
        return smart_resize(resized[0], resized[1], factor, low, high)
    height, width = image_size(src, exif_transpose=route.exif_transpose)
    low = low if min_pixels is None else min_pixels
    high = high if max_pixels is None else max_pixels
    return smart_resize(height, width, factor, low, high)


def _frame_sizes(
    sources: Sequence[Any],
    lay: LayoutRules,
    route: Route,
    min_pixels: int | None,
    max_pixels: int | None,
    resized: tuple[int, int] | None,
) -> list[tuple[int, int]]:
    """Each frame's size in pixels ``(height, width)`` after the route's per-frame step."""
    sizes = []
    for i, src in enumerate(sources):
        try:
            if route.frame_prescale == 1:
                grid = load_image(
                    src, rules=lay, min_pixels=min_pixels, max_pixels=max_pixels, resized=resized, route=route
                ).grid
                sizes.append((grid[1] * lay.patch_size, grid[2] * lay.patch_size))
            else:
                sizes.append(_prescaled(src, lay, route, min_pixels, max_pixels, resized))
        except MediaError as exc:
            raise MediaError(f"frame {i}: {exc}") from None
    return sizes


def load_frames(
    sources: Sequence[Any] | np.ndarray,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    fps: float | None = None,
    sample_fps: float | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    total_pixels: int | None = None,
    resized: tuple[int, int] | None = None,
    wrap: bool = True,
    route: str | Route | None = None,
) -> Video:
    """A :class:`mrope.Video` of frame images, in order, sized as ``route``'s pipeline sizes them (see
    the module docstring; default ``"processor"``), the count padded to a multiple of
    ``rules.temporal_patch_size`` with the last frame. ``sources`` are the frames' files (paths, bytes,
    PIL images, numpy images) or one numpy array ``[T, H, W, C]`` ``uint8`` of the frames (a decoder's
    output).

    Args:
        fps, sample_fps: the rate, frames per second: ``fps`` under the ``"processor"`` and ``"vllm"``
            routes (default ``rules.fps``), ``sample_fps`` under ``"qwen-vl-utils"`` (default 2.0); the
            other key is refused, so a rate is never silently dropped.
        min_pixels, max_pixels, total_pixels, resized: the item's sizing keys (``total_pixels``:
            ``"qwen-vl-utils"`` only, the clip's pixel budget).

    Raises:
        MediaError: no frames, the route's other rate key, frames that resize to different sizes, or an
            unreadable frame (named by its index).
    """
    lay = resolve_rules(model, rules)
    if isinstance(sources, np.ndarray):
        sources = frame_list(sources)
    way = get_route(route)
    if not sources:
        raise MediaError("a video given as a list of frames needs at least one frame")
    unread = {"fps": fps, "sample_fps": sample_fps, "total_pixels": total_pixels}
    unread.pop(way.frame_list_rate)
    if way.frame_prescale != 1:
        unread.pop("total_pixels")
    given = [k for k, v in unread.items() if v is not None]
    if given:
        raise MediaError(
            f"the {way.name!r} route times a frame list by {way.frame_list_rate!r} and does not read "
            f"{' or '.join(map(repr, given))} there; drop it, or name the route that reads it"
        )
    rate = sample_fps if way.frame_list_rate == "sample_fps" else fps
    rate = float(rate if rate is not None else way.frame_list_default_rate or lay.fps)
    sizes = sorted(set(_frame_sizes(sources, lay, way, min_pixels, max_pixels, resized)))
    if len(sizes) > 1:
        raise MediaError(
            f"the frames resize to different sizes {sizes} (pixels h x w); the processor stacks them into one "
            "video, so give frames of one size (or resized_height / resized_width)"
        )
    tps = lay.temporal_patch_size
    n = math.ceil(len(sources) / tps) * tps
    h, w = sizes[0]
    if way.frame_prescale != 1:
        h, w = _video_stage(
            n, h, w, route_video_rules(lay, way), min_pixels, max_pixels, total_pixels, resized
        )
    given = {
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "total_pixels": total_pixels,
        "fps": sample_fps if way.frame_list_rate == "sample_fps" else fps,
    }
    return Video(
        grid=(n // tps, h // lay.patch_size, w // lay.patch_size),
        fps=rate,
        second_per_grid=tps / rate,
        frame_times=tuple(i / rate for i in range(n)),
        wrap=wrap,
        record=media_record("video", model, lay.name, way, given, (h, w), len(sources)),
    )


def _video_stage(
    n: int,
    height: int,
    width: int,
    lay: LayoutRules,
    min_pixels: int | None,
    max_pixels: int | None,
    total_pixels: int | None,
    resized: tuple[int, int] | None,
) -> tuple[int, int]:
    """qwen-vl-utils' resize of the stacked frames (``vision_process.py:448-467``)."""
    if resized is not None:
        return smart_resize(
            resized[0], resized[1], lay.resize_factor, lay.image_min_pixels, lay.image_max_pixels
        )
    low = lay.video_min_pixels if min_pixels is None else min_pixels
    total = lay.video_total_pixels if total_pixels is None else total_pixels
    ceiling = video_max_pixels(n, low, lay.video_max_pixels, total, lay.temporal_patch_size)
    if max_pixels is not None:
        ceiling = min(max_pixels, ceiling)
    return smart_resize(height, width, lay.resize_factor, low, ceiling)


__all__ = ["load_frames"]
