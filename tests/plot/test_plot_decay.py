"""mrope._plot.render_decay: each scheme's curve is drawn in its colour, in the panel of its axis, at the
height of its score."""

from __future__ import annotations

import numpy as np
import pytest

from mrope import LayoutError
from mrope._plot import render_decay
from mrope._plot.decay import MARGIN, PANEL_HEIGHT, SCHEME_COLOURS

TOP = 64
"""The panels' top row: the headline's 40 px and the axis names' 24 px (render_decay's layout)."""


def _mask(img, colour) -> np.ndarray:
    return np.all(np.asarray(img)[..., :3] == np.asarray(colour, dtype=np.uint8), axis=-1)


def test_curves_sit_in_their_axis_panel_at_their_score() -> None:
    """Scheme a is flat at 1 along t and h (drawn on the panels' top row); scheme b falls from 1 to 0
    along t only; the h panel holds no pixel of b's colour (the control: b's colour does appear in t's)."""
    d = list(range(5))
    curves = {
        "a": {"t": (d, [1.0] * 5), "h": (d, [1.0] * 5)},
        "b": {"t": (d, [1.0, 0.75, 0.5, 0.25, 0.0])},
    }
    img = render_decay(curves, width=900)
    panel_w = (900 - MARGIN * 3) // 2
    a, b = _mask(img, SCHEME_COLOURS[0]), _mask(img, SCHEME_COLOURS[1])
    panels = [
        slice(MARGIN + i * (panel_w + MARGIN) + 4, MARGIN + i * (panel_w + MARGIN) + panel_w - 4)
        for i in (0, 1)
    ]
    for cols in panels:
        assert a[TOP - 1 : TOP + 2, cols].any(axis=0).mean() > 0.95  # a's line runs along the top row
    assert b[TOP : TOP + PANEL_HEIGHT + 1, panels[0]].any()
    assert not b[TOP : TOP + PANEL_HEIGHT + 1, panels[1]].any()
    # b's last point (score 0, the lowest) sits on the bottom row of the t panel, at its right edge
    right = MARGIN + panel_w
    assert b[TOP + PANEL_HEIGHT - 2 : TOP + PANEL_HEIGHT + 3, right - 3 : right + 3].any()


@pytest.mark.parametrize("bad", [599, True, "900"])
def test_bad_width_and_no_curves(bad) -> None:
    with pytest.raises(LayoutError, match="width must be an int >= 600"):
        render_decay({"a": {"t": ([0], [1.0])}}, width=bad)
    with pytest.raises(LayoutError, match="no curves"):
        render_decay({})
