"""A picture of M-RoPE coordinates, drawn with Pillow (no matplotlib).

:func:`render_layout` draws, top to bottom:

- the token sequence: a bar of span kinds (text, wrappers, timestamps, image, video, thumbnail), the t, h
  and w coordinates as three colour strips on one value scale, a row marking tokens that share their
  whole ``(t, h, w)`` with another token, and a chart of the three coordinates against the token index:
  jumps (text resuming past an image), resets (a block
  restarting at 0) and overlaps (two segments on the same values) show at a glance;
- every image (and tile grid, and the first frame of every video) as heat maps of its h and w, in the
  image's own geometry, tiles outlined and numbered in emission order, each map with its value range.

:func:`save_layout` writes the picture as a PNG; :func:`render_decay` draws per-axis score decay curves
(what :func:`mrope.testing.compare_schemes` measures), a panel per axis and a line per scheme. The package's modules: :mod:`mrope._plot.style` (colours,
fonts), :mod:`mrope._plot.axis` (the compressed token and value axes), :mod:`mrope._plot.sequence` (the
sequence section) and :mod:`mrope._plot.grids` (the heat maps).
"""

from __future__ import annotations

from mrope import _extras

_extras.require("the layout picture (mrope plot)", "media", "PIL")

import os
from collections.abc import Sequence
from typing import Any

from PIL import Image as PILImage

from mrope._errors import LayoutError
from mrope._plot.axis import MIN_SEGMENT_PX
from mrope._plot.decay import render_decay
from mrope._plot.grids import VisionMap, grid_section, vision_maps
from mrope._plot.sequence import sequence_section
from mrope._plot.style import BACKGROUND, KIND_COLOURS, LEFT, RIGHT, Fonts, colourise
from mrope._positions import Positions


def render_layout(
    positions: Positions,
    *,
    width: int = 1200,
    title: str | None = None,
    labels: Sequence[str] | None = None,
    max_panels: int = 8,
    position_set: str | None = None,
) -> PILImage.Image:
    """A picture of ``positions``: the sequence strips and chart, then the vision heat maps.

    Args:
        positions: what :func:`mrope.build_positions` returned, with three rows (t, h, w).
        width: picture width in pixels (at least 600); the height follows from the content.
        title: the headline (default: preset, token count, delta, max position).
        labels: one short description per segment (file names), used in the heat-map captions.
        max_panels: most heat-map panels drawn (the rest are counted).
        position_set: the name of the position set ``positions`` are (one of a model's
            :class:`mrope.LayerSets`), named in the default headline.

    Raises:
        LayoutError: positions of other than three rows (VRoPE's four maps, HunyuanOCR's four axes).

    Returns:
        an RGB ``PIL.Image.Image``; ``image.info["mrope_layout"]`` holds the geometry of the sequence
        rows: ``x0`` and ``width`` of the token axis, ``columns`` (int64 ``[width]``: the first token
        each pixel column shows; the axis is compressed by segment, each segment at least
        :data:`MIN_SEGMENT_PX` wide), ``segments`` (``segment``, ``start``, ``stop``, ``x0``, ``x1`` of
        each), ``labels`` (the text and box of every segment's label) and ``rows``, the ``(top, bottom)``
        pixel rows of ``span``, ``labels``, ``t``, ``h``, ``w``, ``shared`` and ``chart``.
    """
    if not isinstance(positions, Positions):
        raise LayoutError(f"render_layout takes mrope.Positions; got {type(positions).__name__}")
    if isinstance(width, bool) or not isinstance(width, int) or width < 600:
        raise LayoutError(f"width must be an int >= 600 pixels; got {width!r}")
    if positions.ids.shape[0] != 3:
        raise LayoutError(
            f"render_layout draws three position rows (t, h, w); the {positions.rules.name!r} rules write "
            f"{positions.ids.shape[0]} rows"
        )
    fonts = Fonts.default()
    n = positions.num_tokens
    top = positions.ids.max().item() if n else -1
    if title is None:
        named = positions.rules.name if position_set is None else f"{positions.rules.name} [{position_set}]"
        title = f"{named}: {n} tokens, max position {top:g}, delta {positions.delta:g}"
    rows: dict[str, tuple[int, int]] = {}
    geometry: dict[str, Any] = {}
    parts = [sequence_section(positions, width, fonts, title, rows, geometry)]
    grids = grid_section(vision_maps(positions, labels or ()), width, fonts, max_panels)
    if grids is not None:
        parts.append(grids)
    out = PILImage.new("RGB", (width, sum(p.height for p in parts)), BACKGROUND)
    y = 0
    for part in parts:
        out.paste(part, (0, y))
        y += part.height
    out.info["mrope_layout"] = {"x0": LEFT, "width": width - LEFT - RIGHT, "rows": rows, **geometry}
    return out


def save_layout(positions: Positions, path: str | os.PathLike[str], **options: Any) -> PILImage.Image:
    """:func:`render_layout` written to ``path`` as a PNG; returns the picture."""
    img = render_layout(positions, **options)
    img.save(os.fspath(path), format="PNG", optimize=True)
    return img


__all__ = [
    "KIND_COLOURS",
    "MIN_SEGMENT_PX",
    "VisionMap",
    "colourise",
    "render_decay",
    "render_layout",
    "save_layout",
    "vision_maps",
]
