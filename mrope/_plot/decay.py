"""A picture of per-axis score decay curves: one panel per axis (t, h, w), one line per scheme.

:func:`render_decay` draws what :func:`mrope.testing.compare_schemes` measured (its
``DecayCurve`` values, passed as plain numbers): the mean q.k score of constant content against the
distance in frames, rows and columns. Sizes are pixels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PIL import Image as PILImage
from PIL import ImageDraw

from mrope._errors import LayoutError
from mrope._plot.style import AXIS_COLOURS, BACKGROUND, GRID_LINE, INK, MUTED, Fonts

SCHEME_COLOURS: tuple[tuple[int, int, int], ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)
"""The line colour of each scheme, in the order given (tab10; repeats past ten)."""

PANEL_HEIGHT = 260
"""Height of one axis panel in pixels."""
MARGIN = 48
"""Left margin of a panel (its score ticks) and gap between panels, in pixels."""

Curves = Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]]
"""``{scheme: {axis: (distances, scores)}}``."""


def _panel(
    draw: ImageDraw.ImageDraw,
    box: tuple[int, int, int, int],
    axis: str,
    curves: Curves,
    lo: float,
    fonts: Fonts,
) -> None:
    left, top, right, bottom = box
    draw.rectangle(box, outline=MUTED)
    for frac in (0.0, 0.5, 1.0):
        y = round(bottom - frac * (bottom - top))
        draw.line((left, y, right, y), fill=GRID_LINE)
        draw.text((left - 36, y - 7), f"{lo + frac * (1.0 - lo):.2f}", fill=INK, font=fonts.small)
    far = max((max(c[axis][0], default=0) for c in curves.values() if axis in c), default=0) or 1
    for k, per_axis in enumerate(curves.values()):
        if axis not in per_axis:
            continue
        dist, score = per_axis[axis]
        pts = [
            (left + d / far * (right - left), bottom - (s - lo) / (1.0 - lo) * (bottom - top))
            for d, s in zip(dist, score, strict=True)
        ]
        colour = SCHEME_COLOURS[k % len(SCHEME_COLOURS)]
        if len(pts) > 1:
            draw.line(pts, fill=colour, width=2)
        for x, y in pts:
            draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=colour)
    draw.text((left, top - 20), f"along {axis}", fill=AXIS_COLOURS.get(axis, INK), font=fonts.text)
    draw.text((left, bottom + 4), f"distance 0 .. {far:g}", fill=MUTED, font=fonts.small)


def render_decay(curves: Curves, *, width: int = 1200, title: str = "q.k score decay") -> PILImage.Image:
    """The decay curves as an RGB picture: a panel per axis side by side, a legend of the schemes below.

    Args:
        curves: ``{scheme: {axis: (distances, scores)}}``, axes ``"t"``, ``"h"``, ``"w"``; scores are
            means of ``q . k / head_dim`` (at most 1 without an attention factor).
        width: picture width in pixels (at least 600).
        title: the headline.
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 600:
        raise LayoutError(f"width must be an int >= 600 pixels; got {width!r}")
    if not curves:
        raise LayoutError("render_decay: no curves to draw")
    fonts = Fonts.default()
    axes = [a for a in ("t", "h", "w") if any(a in c for c in curves.values())]
    scores = [s for c in curves.values() for _, ys in c.values() for s in ys]
    lo = min(min(scores, default=0.0), 0.0)
    panel_w = (width - MARGIN * (len(axes) + 1)) // max(len(axes), 1)
    legend_rows = (len(curves) + 3) // 4
    height = 40 + 24 + PANEL_HEIGHT + 28 + 22 * legend_rows + 12
    img = PILImage.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(img)
    draw.text((MARGIN, 10), title, fill=INK, font=fonts.title)
    top = 40 + 24
    for i, axis in enumerate(axes):
        left = MARGIN + i * (panel_w + MARGIN)
        _panel(draw, (left, top, left + panel_w, top + PANEL_HEIGHT), axis, curves, lo, fonts)
    y0 = top + PANEL_HEIGHT + 28
    col_w = (width - 2 * MARGIN) // 4
    for k, name in enumerate(curves):
        x, y = MARGIN + (k % 4) * col_w, y0 + 22 * (k // 4)
        colour = SCHEME_COLOURS[k % len(SCHEME_COLOURS)]
        draw.line((x, y + 8, x + 24, y + 8), fill=colour, width=3)
        draw.text((x + 30, y), name[: max(col_w // 8, 8)], fill=INK, font=fonts.text)
    return img


__all__ = ["PANEL_HEIGHT", "SCHEME_COLOURS", "render_decay"]
