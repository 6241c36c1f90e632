"""A video given as a list of frame images, sized as qwen-vl-utils' ``fetch_video`` sizes one.

qwen-vl-utils (``vision_process.py``, ``fetch_video`` with a list or tuple under ``"video"``) reads each
frame with ``fetch_image`` under the item's own keys (``min_pixels``, ``max_pixels``, ``resized_height``
/ ``resized_width``, else the image bounds), pads the list with its last frame to a multiple of the
temporal patch (``ceil_by_factor(len, FRAME_FACTOR)``), and gives the processor the item's ``fps``
(2.0 when absent) as the sampling rate. Only each frame's header is read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._errors import MediaError
from mrope._rules import LayoutRules
from mrope._segments import Video
from mrope.media._image import load_image
from mrope.media._memory import frame_list
from mrope.models import ModelLike, resolve_rules


def load_frames(
    sources: Sequence[Any] | np.ndarray,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    fps: float | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    resized: tuple[int, int] | None = None,
    wrap: bool = True,
) -> Video:
    """A :class:`mrope.Video` of frame images, in order: each sized as :func:`mrope.media.load_image`
    sizes an image (with ``min_pixels`` / ``max_pixels`` / ``resized``), the count padded to a multiple
    of ``rules.temporal_patch_size`` with the last frame, sampled at ``fps`` (default ``rules.fps``).
    ``sources`` are the frames' files (paths, bytes, PIL images, numpy images) or one numpy array
    ``[T, H, W, C]`` ``uint8`` of the frames (a decoder's output).

    Raises:
        MediaError: no frames, frames that resize to different sizes (the processor stacks them), or an
            unreadable frame (named by its index).
    """
    lay = resolve_rules(model, rules)
    if isinstance(sources, np.ndarray):
        sources = frame_list(sources)
    if not sources:
        raise MediaError("a video given as a list of frames needs at least one frame")
    rate = lay.fps if fps is None else float(fps)
    grids = []
    for i, src in enumerate(sources):
        try:
            grids.append(
                load_image(src, rules=lay, min_pixels=min_pixels, max_pixels=max_pixels, resized=resized).grid
            )
        except MediaError as exc:
            raise MediaError(f"frame {i}: {exc}") from None
    sizes = sorted({g[1:] for g in grids})
    if len(sizes) > 1:
        raise MediaError(
            f"the frames resize to different sizes {sizes} (patches h x w); the processor stacks them into one "
            "video, so give frames of one size (or resized_height / resized_width)"
        )
    tps = lay.temporal_patch_size
    n = math.ceil(len(grids) / tps) * tps
    _, h, w = grids[0]
    return Video(
        grid=(n // tps, h, w),
        fps=rate,
        second_per_grid=tps / rate,
        frame_times=tuple(i / rate for i in range(n)),
        wrap=wrap,
    )


__all__ = ["load_frames"]
