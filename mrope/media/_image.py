"""Image size from the file header, and :func:`load_image`: a file -> :class:`mrope.Image` grid.

Nothing here decodes pixels: position ids need only the size. :func:`image_size` opens the file with
PIL's lazy ``Image.open`` (header only), applies the EXIF orientation (5-8 swap height and width) and
refuses sizes that cannot be real (see :data:`DEFAULT_MAX_IMAGE_PIXELS` and the PNG deflate bound).
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np
from PIL import Image as PILImage

from mrope._errors import MediaError
from mrope._route import Route
from mrope._rules import LayoutRules
from mrope._segments import Image
from mrope.media._crops import AlignedCrop, align_box, whole_at_crop_scale
from mrope.media._deadline import DeadlineReader, ProbeDeadlineError
from mrope.media._memory import array_size
from mrope.media._resize import smart_resize, smart_resize_clip, smart_resize_edges
from mrope.media._source import open_source
from mrope.media._sources import media_record
from mrope.media._tiling import TilePlan
from mrope.models import ModelLike, resolve_rules
from mrope.models._registry import get_route

DEFAULT_MAX_IMAGE_PIXELS = 2 * 89_478_485
"""Largest image (width x height, pixels) :func:`image_size` accepts: 178,956,970 pixels, PIL's own
decompression-bomb error threshold (a 200 MP phone photo, 16320 x 12240, is just above it: pass
``max_pixels=`` and raise ``PIL.Image.MAX_IMAGE_PIXELS`` to read such files)."""

DEFLATE_MAX_RATIO = 1032
"""Deflate (PNG's compression) never expands data more than about 1032:1, so a PNG whose rows need
more than ``1032 x`` its file size in bytes is truncated or forged."""

_ORIENTATION_TAG = 0x0112
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_MAX_PNG_CHUNKS = 10_000
_MAX_EXIF_BYTES = 1 << 20


def _pil_open(f: IO[bytes], name: str) -> PILImage.Image:
    try:
        return PILImage.open(f)
    except ProbeDeadlineError:
        raise
    except PILImage.DecompressionBombError as exc:
        raise MediaError(f"{name}: {exc} (refused without decoding)") from None
    except PILImage.UnidentifiedImageError:
        raise MediaError(
            f"{name} is not an image PIL can identify (unknown format, or a damaged or truncated header)"
        ) from None
    except Exception as exc:  # PIL raises many types on hostile bytes; all of them mean "not an image"
        raise MediaError(f"{name} is not a readable image ({type(exc).__name__}: {exc})") from None


def _png_chunk(f: IO[bytes], size: int, wanted: bytes) -> bytes | None:
    """The data of the first ``wanted`` chunk of a PNG, found by skipping chunks (no inflate)."""
    pos = len(_PNG_SIGNATURE)
    for _ in range(_MAX_PNG_CHUNKS):
        if pos + 8 > size:
            return None
        f.seek(pos)
        length, kind = struct.unpack(">I4s", f.read(8))
        if kind == wanted:
            return f.read(min(length, _MAX_EXIF_BYTES)) if length <= _MAX_EXIF_BYTES else None
        if kind == b"IEND":
            return None
        pos += 12 + length
    return None


def _check_png_chunks(f: IO[bytes], size: int, name: str) -> None:
    """Refuse a PNG with more than :data:`_MAX_PNG_CHUNKS` chunks before its pixel data: Pillow reads
    every one of them (about 30 us each) before it knows the size, so millions of empty ones would hold
    a reader for minutes. Chunks are skipped by their lengths; nothing is inflated."""
    pos = len(_PNG_SIGNATURE)
    for _ in range(_MAX_PNG_CHUNKS):
        if pos + 8 > size:
            return
        f.seek(pos)
        head = f.read(8)
        if len(head) < 8:
            return
        length, kind = struct.unpack(">I4s", head)
        if kind in (b"IDAT", b"IEND"):
            return
        pos += 12 + length
    raise MediaError(
        f"{name} has more than {_MAX_PNG_CHUNKS} PNG chunks before its pixel data; expected an image "
        "with a header of a few chunks"
    )


def _orientation(im: PILImage.Image, f: IO[bytes] | None, size: int) -> int:
    """EXIF orientation 1..8 (1 when absent or unreadable); never decodes pixels."""
    try:
        if im.format == "PNG" and "exif" not in im.info:
            # PIL's PNG getexif() loads the whole image to find an eXIf chunk after the pixel data;
            # walk the chunks instead.
            if f is None:
                exif = im.getexif()
            else:
                raw = _png_chunk(f, size, b"eXIf")
                if raw is None:
                    return 1
                exif = PILImage.Exif()
                exif.load(raw)
        else:
            exif = im.getexif()
        value = int(exif.get(_ORIENTATION_TAG, 1))
    except Exception:  # a malformed EXIF block is treated as "no orientation", as viewers do
        return 1
    return value if 1 <= value <= 8 else 1


def _stored_size(im: PILImage.Image) -> tuple[int, int]:
    """``(width, height)`` as stored, before EXIF orientation (newer Pillow already swaps a TIFF's
    ``size`` for orientations 5-8; its tags keep the stored size)."""
    if im.format == "TIFF":
        tags = getattr(im, "tag_v2", None)
        if tags is not None and isinstance(tags.get(256), int) and isinstance(tags.get(257), int):
            return int(tags[256]), int(tags[257])
    return im.size


def _check_png_bound(f: IO[bytes], size: int, width: int, height: int, name: str) -> None:
    f.seek(16)
    head = f.read(10)
    if len(head) < 10:
        return
    bit_depth, colour = head[8], head[9]
    channels = _PNG_CHANNELS.get(colour)
    if channels is None or bit_depth not in (1, 2, 4, 8, 16):
        return
    raw = height * (1 + math.ceil(width * bit_depth * channels / 8))
    if raw > DEFLATE_MAX_RATIO * size + 65536:
        raise MediaError(
            f"{name} claims a {width}x{height} PNG (w x h; {raw} bytes of pixel rows) but holds only "
            f"{size} bytes, and deflate expands at most {DEFLATE_MAX_RATIO}:1: truncated or forged"
        )


def image_size(
    source: Any,
    *,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    deadline: float | None = None,
    exif_transpose: bool = True,
) -> tuple[int, int]:
    """``(height, width)`` in pixels of an image as displayed, from its header only.

    EXIF orientations 5-8 (transposed or rotated by 90 / 270 degrees, as phones write portrait photos)
    swap height and width; with ``exif_transpose=False`` the stored size is returned (what a loader that
    ignores the orientation hands on: `mrope.models._routes`).

    Args:
        source: a path, the file's bytes, a binary file-like object, a ``PIL.Image.Image``, or a numpy
            image ``[H, W, C]`` ``uint8`` (:func:`mrope.media._memory.array_size`; no orientation).
        max_pixels: the largest ``height * width`` accepted (default
            :data:`DEFAULT_MAX_IMAGE_PIXELS`).
        deadline: a ``time.monotonic()`` value; the header is read through a
            :class:`~mrope.media._deadline.DeadlineReader`, so reading stops with
            :class:`~mrope.media._deadline.ProbeDeadlineError` once it is past (Pillow's readers loop over
            chunks and markers without a bound of their own).

    Raises:
        MediaError: not an image, corrupt or truncated within the header, cut off before its pixel
            data, a zero size, more than ``max_pixels`` pixels, or a PNG whose file is far too small
            for the size it claims (deflate bound). Nothing is decoded, so a file cut in the middle of
            its pixel data still has a size.
    """
    if isinstance(source, np.ndarray):
        height, width = array_size(source)
        orientation = 1
        name = f"<numpy image {height}x{width}>"
    elif isinstance(source, PILImage.Image):
        width, height = _stored_size(source)
        if width <= 0 or height <= 0:
            raise MediaError(f"image has zero size {width}x{height} (w x h); expected at least 1x1 pixels")
        orientation = _orientation(source, None, 0)
        name = f"<PIL {source.mode} image>"
    else:
        with open_source(source) as src:
            if src.file.read(8) == _PNG_SIGNATURE:
                _check_png_chunks(src.file, src.size, src.name)
            src.file.seek(0)
            file = src.file if deadline is None else DeadlineReader(src.file, deadline, src.name)
            im = _pil_open(file, src.name)  # type: ignore[arg-type]
            name = src.name
            width, height = _stored_size(im)
            if width <= 0 or height <= 0:
                raise MediaError(
                    f"{name} has zero size {width}x{height} (w x h); expected at least 1x1 pixels"
                )
            if width * height > max_pixels:
                raise MediaError(
                    f"{name} is {width}x{height} (w x h) = {width * height} pixels; at most {max_pixels} "
                    "are accepted (decompression-bomb guard; refused without decoding)"
                )
            tiles = getattr(im, "tile", None) or []
            offset = min((int(t[2]) for t in tiles), default=0)
            if offset and src.size <= offset:
                raise MediaError(
                    f"{name} is truncated: it ends at byte {src.size}, before its pixel data at byte {offset}"
                )
            if im.format == "PNG":
                _check_png_bound(src.file, src.size, width, height, name)
            orientation = _orientation(im, src.file, src.size)
    if width * height > max_pixels:
        raise MediaError(
            f"{name} is {width}x{height} (w x h) pixels; at most {max_pixels} pixels are accepted"
        )
    if orientation >= 5 and exif_transpose:
        width, height = height, width
    return height, width


def _crop_box(crop: Any, height: int, width: int) -> tuple[int, int, int, int]:
    try:
        box = tuple(crop)
        ok = len(box) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in box)
    except TypeError:
        ok = False
    if not ok:
        raise MediaError(f"crop must be a pixel box (top, left, height, width) of 4 ints; got {crop!r}")
    top, left, ch, cw = box  # type: ignore[misc]
    if top < 0 or left < 0 or ch < 1 or cw < 1 or top + ch > height or left + cw > width:
        raise MediaError(
            f"crop (top, left, height, width) = {box} must lie inside the {height}x{width} (h x w) image "
            "with a positive size"
        )
    return top, left, ch, cw


def _check_sizes_images(lay: LayoutRules) -> None:
    """Refuse to size an image file under rules whose processor mrope does not reproduce.

    Raises:
        MediaError: ``positions_base="canvas"``, ``"image_step"`` or ``image_bounds="none"`` (MiniCPM-V 4.7
            and 4.6: the processor slices each picture into a thumbnail and detail crops, and that slicing is
            not in :mod:`mrope.media`; Qwen3-ASR: its processor takes no images; Falcon-OCR: its first resize).
    """
    if lay.image_bounds == "none":
        raise MediaError(
            f"the {lay.name!r} rules (image_bounds='none') size no image file: mrope.media does not "
            "reproduce their processor's image input (MiniCPM-V 4.6's slices each picture into a thumbnail "
            "and detail crops: take the crops' grids from the processor (its tgt_sizes) and pass each crop "
            "as Image(grid); Qwen3-ASR's takes no images)"
        )
    if lay.positions_base == "image_step":
        raise MediaError(
            f"the {lay.name!r} rules (positions_base='image_step', Falcon-OCR) size no image file: its processor "
            "first brings the sides into [64, 1024] px, which mrope.media does not reproduce; pass "
            "Image(grid=(1, height // 16, width // 16)) from its pixel_values"
        )
    if lay.positions_base == "canvas":
        raise MediaError(
            f"the {lay.name!r} processor slices each image into a thumbnail and detail crops, which "
            "mrope.media does not reproduce; take the crops' grids from the processor (its image_grid_thw "
            "/ target_sizes) and pass Image(grid, tiles=(cols, rows), thumbnail_grid=...), or Image(grid) for "
            "an unsliced picture"
        )


def _resize_frame(height: int, width: int, lay: LayoutRules) -> tuple[int, int]:
    """``image_bounds="frame"``: the bounds hold for one image's ``h * w`` (Qwen2-VL's processor)."""
    return smart_resize(
        height,
        width,
        lay.resize_factor,
        lay.image_min_pixels,
        lay.image_max_pixels,
        upscale_short_side=lay.image_upscale_short_side,
    )


def _resize_clip(height: int, width: int, lay: LayoutRules) -> tuple[int, int]:
    """``image_bounds="clip"`` (GLM-4.1V): the bounds hold for ``temporal_patch_size`` copies of the image."""
    tps = lay.temporal_patch_size
    return smart_resize_clip(
        tps, height, width, tps, lay.resize_factor, lay.image_min_pixels, lay.image_max_pixels
    )


def _resize_edges(height: int, width: int, lay: LayoutRules) -> tuple[int, int]:
    """``image_bounds="edges"`` (GLM-Image): the bounds hold for the shortest and longest edge."""
    return smart_resize_edges(height, width, lay.resize_factor, lay.image_min_pixels, lay.image_max_pixels)


def _resize_none(height: int, width: int, lay: LayoutRules) -> tuple[int, int]:
    """``image_bounds="none"``: no resize mrope reproduces; refused (:func:`_check_sizes_images`)."""
    _check_sizes_images(lay)
    raise AssertionError("image_bounds='none' is refused above")  # pragma: no cover


IMAGE_RESIZERS: dict[str, Callable[[int, int, LayoutRules], tuple[int, int]]] = {
    "frame": _resize_frame,
    "clip": _resize_clip,
    "edges": _resize_edges,
    "none": _resize_none,
}
"""Every ``rules.image_bounds`` value and its resize: ``(height, width, rules) -> (height, width)`` in pixels."""


def _resize_image(height: int, width: int, lay: LayoutRules) -> tuple[int, int]:
    """``(height, width)`` in pixels of a ``height x width`` image after the resize of ``lay.image_bounds``.

    Raises:
        MediaError: an unknown rule, or a size the rule refuses (see :mod:`mrope.media._resize`).
    """
    resize = IMAGE_RESIZERS.get(lay.image_bounds)
    if resize is None:
        raise MediaError(
            f"unknown image_bounds {lay.image_bounds!r} in the {lay.name!r} rules; "
            f"expected one of {sorted(IMAGE_RESIZERS)}"
        )
    return resize(height, width, lay)


def image_grid(
    height: int, width: int, model: ModelLike | None = None, rules: LayoutRules | dict[str, Any] | None = None
) -> tuple[int, int, int]:
    """The encoder patch grid ``(1, H / patch, W / patch)`` of an image of ``height x width`` pixels
    after the model's smart resize (what :func:`load_image` gives for an untiled, uncropped file)."""
    lay = resolve_rules(model, rules)
    _check_sizes_images(lay)
    new_h, new_w = _resize_image(height, width, lay)
    return (1, new_h // lay.patch_size, new_w // lay.patch_size)


def load_image(
    source: Any,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tiling: TilePlan | dict[str, Any] | bool | None = None,
    crop: Sequence[int] | None = None,
    snap: bool = False,
    wrap: bool = True,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    resized: tuple[int, int] | None = None,
    route: str | Route | None = None,
) -> Image:
    """Size an image file by a model's rules: the :class:`mrope.Image` its processor would produce.

    The image (or the crop) is resized with :func:`smart_resize` (``factor = rules.resize_factor``,
    ``rules.image_min_pixels .. rules.image_max_pixels``; :func:`smart_resize_clip` over
    ``temporal_patch_size`` frames when ``rules.image_bounds`` is ``"clip"``, :func:`smart_resize_edges`
    when it is ``"edges"``) and its grid is ``(1, resized_h / patch_size, resized_w / patch_size)``. No
    pixel is decoded.

    Args:
        source: a path, bytes, a binary file-like object, a ``PIL.Image.Image`` or a numpy image
            ``[H, W, C]`` ``uint8``.
        model, rules: the preset and overrides (see :func:`mrope._rules.resolve_rules`).
        tiling: ``None`` (no tiles), ``True`` (defaults) or a :class:`TilePlan` / dict of its fields.
            The image is resized to the InternVL tile grid ``(rows * tile_size, cols * tile_size)``
            instead (the pixel bounds do not apply) and gets ``tiles=(cols, rows)``; a thumbnail
            follows when there is more than one tile and ``thumbnail`` is on. ``tile_size`` must be a
            multiple of ``rules.resize_factor`` (else :class:`MediaError`).
        crop: a pixel box ``(top, left, height, width)`` in the displayed (EXIF-oriented) image. The
            crop is sized on its own; its ``origin`` is the crop's top-left corner in merged-grid
            tokens of the source scaled by the crop's own resize (``resized / crop`` per axis), and
            must fall on the merge grid at that scale. Whether the origin is used is the
            ``LayoutRules.crop`` rule: ``"keep"`` shifts the crop's (h, w) by it, so its tokens get the
            coordinates they have in the whole image at that scale; ``"reset"`` (every released
            model) starts the crop at the block start like any image. The alignment rule is in
            :mod:`mrope.media._crops`; a box off the grid is refused, naming the nearest aligned box.
        snap: take the nearest aligned box (same size, corner moved by less than one merged token at
            the crop's scale) instead of refusing; :func:`crop_segment` returns that box, to crop the
            pixels to.
        wrap: emit vision_start / vision_end around the image.
        min_pixels, max_pixels, resized: one image's own keys, as qwen-vl-utils' ``fetch_image``
            (``vision_process.py``) reads them: ``min_pixels`` / ``max_pixels`` replace
            ``rules.image_min_pixels`` / ``image_max_pixels``; ``resized = (height, width)`` (its
            ``resized_height`` / ``resized_width``) is resized instead of the file's size, under the
            rules' own bounds (qwen-vl-utils' defaults, not the item's). Not with ``tiling`` or ``crop``.
        route: the pipeline whose image loader reads the file (`mrope.models._routes`; default
            ``"processor"``): ``"qwen-vl-utils"`` keeps the stored size of an EXIF-rotated photo, the
            others turn it upright.

    Returns:
        :class:`mrope.Image`, its ``record`` saying how it was read and sized (:class:`MediaRecord`).

    Raises:
        MediaError: an unreadable or out-of-bounds image, or rules whose processor slices images
            (``positions_base="canvas"``, MiniCPM-V 4.7: pass the crops' grids instead).
    """
    lay = resolve_rules(model, rules)
    _check_sizes_images(lay)
    height, width = full = image_size(source, exif_transpose=get_route(route).exif_transpose)
    if resized is not None or min_pixels is not None or max_pixels is not None:
        if tiling or crop is not None:
            raise MediaError("min_pixels, max_pixels and resized size an untiled, uncropped image")
        if resized is not None:
            height, width = resized
        else:
            lay = dataclasses.replace(
                lay,
                image_min_pixels=lay.image_min_pixels if min_pixels is None else min_pixels,
                image_max_pixels=lay.image_max_pixels if max_pixels is None else max_pixels,
            )
    if crop is not None:
        top, left, height, width = _crop_box(crop, height, width)
    factor = lay.resize_factor
    plan = TilePlan.coerce(tiling)
    tiles: tuple[int, int] | None = None
    thumbnail = False
    if plan is not None:
        if plan.tile_size % factor:
            raise MediaError(
                f"tile_size {plan.tile_size} px is not a whole number of merged tokens for {lay.name!r} "
                f"(resize factor {factor} = patch {lay.patch_size} x merge {lay.merge_size}); use a "
                f"multiple of {factor}, e.g. {max(1, round(plan.tile_size / factor)) * factor}"
            )
        cols, rows = plan.select(height, width)
        new_h, new_w = rows * plan.tile_size, cols * plan.tile_size
        tiles, thumbnail = (cols, rows), plan.has_thumbnail(cols, rows)
    else:
        new_h, new_w = _resize_image(height, width, lay)
    origin = (0, 0)
    if crop is not None:
        _, origin = align_box((top, left, height, width), full, (new_h, new_w), factor, snap=snap)
    grid = (1, new_h // lay.patch_size, new_w // lay.patch_size)
    given = {"min_pixels": min_pixels, "max_pixels": max_pixels}
    record = media_record("image", model, lay.name, route, given, (new_h, new_w), 1)
    return Image(grid=grid, tiles=tiles, thumbnail=thumbnail, origin=origin, wrap=wrap, record=record)


def crop_segment(
    source: Any,
    box: Sequence[int],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    snap: bool = True,
    wrap: bool = True,
) -> AlignedCrop:
    """A pixel box on a source image -> the aligned crop and its segment for a model family.

    The crop is sized as :func:`load_image` sizes it (``crop=box``); with ``snap`` (the default) a box
    off the merge grid at the crop's scale moves to the nearest aligned box of the same size (the rule:
    :mod:`mrope.media._crops`). Crop the pixels to ``.box``; ``.image`` is the crop's
    :class:`mrope.Image` and ``.whole`` the source image at the crop's scale, whose merged grid holds
    the crop at ``.image.origin`` (what :func:`mrope.testing.assert_crop_invariant` compares it with).

    Raises:
        MediaError: an unreadable image, a box outside it, or (``snap=False``) an unaligned box.
    """
    lay = resolve_rules(model, rules)
    _check_sizes_images(lay)
    full = image_size(source)
    requested = _crop_box(box, *full)
    resized = _resize_image(requested[2], requested[3], lay)
    aligned, origin = align_box(requested, full, resized, lay.resize_factor, snap=snap)
    grid = (1, resized[0] // lay.patch_size, resized[1] // lay.patch_size)
    return AlignedCrop(
        box=aligned,
        requested=requested,
        image=Image(grid=grid, origin=origin, wrap=wrap),
        whole=whole_at_crop_scale(full, aligned, resized, lay.resize_factor, lay.merge_size, wrap=wrap),
    )
