"""The crop alignment rule: which pixel boxes fall on the merge grid at the crop's own scale, and the snap.

A crop of ``h x w`` source pixels is resized on its own, like any image, to ``H x W`` (the family's
resize: :func:`~mrope.media.smart_resize` with ``factor = patch_size x merge_size``). Its scale is
``H / h`` down the image and ``W / w`` across it. At that scale the whole source image would be
``full_h * H / h`` pixels tall, and its merge grid has one merged token every ``factor`` of those
pixels. The crop is a region of that grid, at whole-token offsets, exactly when its top-left corner
lands on a grid line::

    top  * H / (h * factor)   and   left * W / (w * factor)   are whole numbers

that is, ``top`` is a multiple of ``h * factor / gcd(H, h * factor)`` source pixels (``left`` likewise
with ``w``, ``W``). The corner in merged tokens, ``(top * H / (h * factor), left * W / (w * factor))``,
is the crop's ``Image.origin``. The size of the box sets the scale; only its corner must move to align
it, so the nearest aligned box has the same size and the nearest aligned corner inside the image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mrope._errors import MediaError
from mrope._segments import Image

Box = tuple[int, int, int, int]
"""A pixel box ``(top, left, height, width)`` in the displayed (EXIF-oriented) source image."""


def crop_step(crop_side: int, resized_side: int, factor: int) -> int:
    """The source-pixel step a crop's offset along one axis must be a multiple of: ``offset * resized /
    (crop * factor)`` is whole exactly for multiples of ``crop * factor / gcd(resized, crop * factor)``."""
    den = crop_side * factor
    return den // math.gcd(resized_side, den)


def _nearest_multiple(offset: int, step: int, limit: int) -> int:
    """The multiple of ``step`` in ``[0, limit]`` nearest ``offset`` (the lower one on a tie)."""
    low = offset // step * step
    high = low + step
    return high if high <= limit and high - offset < offset - low else low


def align_box(
    box: Box, full: tuple[int, int], resized: tuple[int, int], factor: int, *, snap: bool = False
) -> tuple[Box, tuple[int, int]]:
    """The aligned box and its origin in merged tokens at the crop's scale.

    Args:
        box: the crop ``(top, left, height, width)`` inside an image of ``full = (height, width)``.
        resized: the crop's own resized size ``(H, W)``.
        factor: pixels per merged token at that size (``patch_size * merge_size``).
        snap: move an unaligned corner to the nearest aligned one (same size) instead of refusing.

    Raises:
        MediaError: the corner is off the merge grid and ``snap`` is false; the message names the
            nearest aligned box.
    """
    top, left, height, width = box
    steps = (crop_step(height, resized[0], factor), crop_step(width, resized[1], factor))
    if top % steps[0] or left % steps[1]:
        near = (
            _nearest_multiple(top, steps[0], full[0] - height),
            _nearest_multiple(left, steps[1], full[1] - width),
            height,
            width,
        )
        if not snap:
            raise MediaError(
                f"crop (top, left, height, width) = {box} is not aligned to the merge grid at the crop's "
                f"scale ({resized[0]}/{height} x {resized[1]}/{width}, {factor} px per merged token there): "
                f"top must be a multiple of {steps[0]} source pixels and left a multiple of {steps[1]} (snap=True "
                f"takes the nearest aligned box); the nearest aligned box is {near}"
            )
        top, left = near[0], near[1]
    origin = (top * resized[0] // (height * factor), left * resized[1] // (width * factor))
    return (top, left, height, width), origin


@dataclass(frozen=True)
class AlignedCrop:
    """A crop box on the merge grid at its own scale, and the segments it gives.

    Attributes:
        box: the aligned pixel box ``(top, left, height, width)``: crop the pixels to this box (it is
            ``requested`` when that was aligned already).
        requested: the box asked for.
        image: the crop's :class:`mrope.Image` (its ``origin`` the box's corner in merged tokens).
        whole: the whole source image at the crop's scale, as an :class:`mrope.Image` (its merged grid
            holds the crop's region at ``image.origin``): the reference a crop invariance check
            compares the crop with.
    """

    box: Box
    requested: Box
    image: Image
    whole: Image

    @property
    def snapped(self) -> bool:
        """Whether the box was moved to align it."""
        return self.box != self.requested


def whole_at_crop_scale(
    full: tuple[int, int], box: Box, resized: tuple[int, int], factor: int, merge_size: int, *, wrap: bool
) -> Image:
    """The source image's grid at the crop's scale: its merged grid is ``floor(full * resized / (crop *
    factor))`` per axis (every aligned crop inside the image fits in it)."""
    rows = full[0] * resized[0] // (box[2] * factor)
    cols = full[1] * resized[1] // (box[3] * factor)
    return Image(grid=(1, rows * merge_size, cols * merge_size), wrap=wrap)


__all__ = ["AlignedCrop", "Box", "align_box", "crop_step", "whole_at_crop_scale"]
