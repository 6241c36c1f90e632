"""Media held in memory (a file's ``bytes``, a ``PIL.Image.Image``, a numpy image ``[H, W, C]`` or video
``[T, H, W, C]`` of ``uint8``): which values are such media, and a numpy frame's size.

These are what Hugging Face ``datasets`` hands out for an ``Image()`` column (decoded PIL images, or
``{"bytes", "path"}`` dicts with decoding off), what TRL's vision datasets hold in their ``images`` column,
and what a video decoder returns (frames ``[T, H, W, 3]`` ``uint8``, as transformers' video processors take
them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mrope._errors import MediaError

CHANNELS = (1, 3, 4)
"""Channel counts of a numpy image: grey, RGB, RGBA (the last axis, channels-last as PIL and decoders
give them)."""

IN_MEMORY_FORMS = "bytes, a PIL image, a numpy image [H, W, 3] uint8 or numpy frames [T, H, W, 3] uint8"
"""The in-memory forms of a media file, as error messages name them."""


def is_pil_image(value: Any) -> bool:
    """Whether ``value`` is a ``PIL.Image.Image`` (checked by its module: no PIL import needed)."""
    return type(value).__module__.startswith("PIL.") and hasattr(value, "size") and hasattr(value, "mode")


def in_memory(value: Any) -> bool:
    """Whether ``value`` is a media file held in memory (any of :data:`IN_MEMORY_FORMS`; a numpy array of
    another shape or dtype counts, so that :func:`array_size` can say what is wrong with it)."""
    return isinstance(value, (bytes, bytearray, memoryview, np.ndarray)) or is_pil_image(value)


def array_size(frame: np.ndarray, what: str = "a numpy image") -> tuple[int, int]:
    """``(height, width)`` of a numpy image ``[H, W, C]`` (``C`` one of :data:`CHANNELS`), ``uint8``.

    Raises:
        MediaError: another number of axes, channel count or dtype, or a zero side.
    """
    if frame.ndim != 3 or frame.shape[-1] not in CHANNELS or frame.dtype != np.uint8:
        raise MediaError(
            f"{what} is an array [H, W, C] of uint8 with C in {CHANNELS} (channels last); got shape "
            f"{list(frame.shape)} of {frame.dtype}"
        )
    height, width = int(frame.shape[0]), int(frame.shape[1])
    if height <= 0 or width <= 0:
        raise MediaError(f"{what} has zero size {width}x{height} (w x h); expected at least 1x1 pixels")
    return height, width


def frame_list(frames: np.ndarray) -> list[np.ndarray]:
    """The frames of a numpy video ``[T, H, W, C]`` ``uint8``, each a view ``[H, W, C]``.

    Raises:
        MediaError: not four axes, or no frame.
    """
    if frames.ndim != 4:
        raise MediaError(
            f"numpy video frames are an array [T, H, W, C] of uint8; got shape {list(frames.shape)} of "
            f"{frames.dtype}"
        )
    if frames.shape[0] == 0:
        raise MediaError("numpy video frames [T, H, W, C] hold no frame (T = 0)")
    return list(frames)


__all__ = ["CHANNELS", "IN_MEMORY_FORMS", "array_size", "frame_list", "in_memory", "is_pil_image"]
