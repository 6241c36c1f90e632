"""The plot's look: colours, the viridis value scale, fonts, text measuring and tick values.

Every colour is an RGB ``(r, g, b)`` tuple of ints in ``[0, 255]``; sizes are pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import ImageDraw, ImageFont

BACKGROUND = (255, 255, 255)
INK = (30, 30, 30)
MUTED = (110, 110, 110)
GRID_LINE = (225, 225, 225)
KIND_COLOURS: dict[str, tuple[int, int, int]] = {
    "text": (205, 205, 205),
    "wrapper": (120, 120, 120),
    "timestamp": (245, 166, 35),
    "image": (86, 140, 215),
    "video": (76, 175, 110),
    "thumbnail": (160, 110, 205),
    "audio": (230, 120, 90),
}
"""The colour of each span kind in the sequence's span bar and legend."""

AXIS_COLOURS = {"t": (214, 39, 40), "h": (31, 119, 180), "w": (44, 160, 44)}
"""The colour of each coordinate's name, chart line and map label."""

SHARED = (200, 0, 140)
"""Tokens sharing one (t, h, w): magenta, a colour nothing else uses."""

LEFT, RIGHT = 96, 24
"""Margins of the token axis in pixels: the row names sit in the left one."""

# viridis at nine stops (perceptually uniform, readable in grey and by most colour-blind readers)
_STOPS = np.array(
    [
        (68, 1, 84),
        (71, 44, 122),
        (59, 81, 139),
        (44, 113, 142),
        (33, 144, 141),
        (39, 173, 129),
        (92, 200, 99),
        (170, 220, 50),
        (253, 231, 37),
    ],
    dtype=np.float64,
)
_LUT = np.stack(
    [np.interp(np.linspace(0, 1, 256), np.linspace(0, 1, len(_STOPS)), _STOPS[:, c]) for c in range(3)],
    axis=1,
).astype(np.uint8)


def colourise(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """uint8 RGB of ``values`` on the viridis scale from ``lo`` (dark) to ``hi`` (bright)."""
    span = max(hi - lo, 1e-9)
    idx = np.clip(np.round((np.asarray(values, dtype=np.float64) - lo) / span * 255), 0, 255).astype(np.int64)
    return _LUT[idx]


def _font(size: int) -> Any:
    """Pillow's default font at ``size`` pixels (the fixed bitmap font on old Pillow)."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
        return ImageFont.load_default()


@dataclass
class Fonts:
    """The three font sizes of the picture (Pillow fonts)."""

    title: Any
    text: Any
    small: Any

    @classmethod
    def default(cls) -> Fonts:
        """Pillow's default font at 18, 14 and 12 px."""
        return cls(_font(18), _font(14), _font(12))


def text_size(draw: ImageDraw.ImageDraw, text: str, font: Any) -> tuple[int, int]:
    """Width and height in pixels of ``text`` drawn in ``font``."""
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return int(right - left), int(bottom - top)


def nice_ticks(hi: float, n: int = 6) -> list[int]:
    """Round tick values in ``[0, hi]``: multiples of 1, 2 or 5 times a power of ten."""
    if hi <= 0:
        return [0]
    raw = hi / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return list(range(0, int(hi) + 1, int(step)))
