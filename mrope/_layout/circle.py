"""The ``circle`` spatial rule (Circle-RoPE): a frame's grid mapped onto a circle orthogonal to the text line.

Source: Wang et al., "Circle-RoPE: Cone-like Decoupled Rotary Positional Embedding for Large
Vision-Language Models" (2025), repo lose4578/CircleRoPE at 063fb2c, ``code/circle_rope.py``:

- ``get_circle_rope_index`` :6-64 stacks ``(w, h, t)``, centres each axis on its midpoint
  (``move_to_origin_coords`` :67-85, ``move_to_origin: true`` in ``code/config.json``), maps the points
  onto a circle (``map_to_circle`` :162-214) and turns that circle's plane to be orthogonal to the text
  direction ``(1, 1, 1)`` (``rotate_plane_perpendicular_to_vector`` :128-159), returning rows ``(t, h, w)``.
- ``map_to_circle``: token ``(j, k)`` of the centred grid has angle
  ``alpha * theta_norm + (1 - alpha) * theta_index``: ``theta_norm`` is ``atan2(h, w)`` stretched linearly
  from its ``[min, max]`` over the grid onto ``[0, 2 pi]`` (left as is when every angle is equal),
  ``theta_index = 2 pi (j W' + k) / (H' W')``; the point is ``radius (cos, sin)`` of that angle.
- The plane's basis: ``u = (-1, 1, 0) / sqrt 2``, ``v = (1, 1, 1) / sqrt 3 x u = (-1, -1, 2) / sqrt 6``;
  the point ``(X, Y)`` becomes ``X u + Y v`` on ``(w, h, t)``. Every token of the block sums to 0 over its
  three rows: all image tokens are equally far from the text line through the block start.

The model adds the block start ``s`` on every row (``modular_qwen2_5_vl_circle_rope.py:177``), and text
resumes one past the block's largest coordinate (:164, :181): mrope's ``max+1`` advance. Only one frame
is mapped (``map_to_circle`` reads frame 0, :175-177), so a block of several frames has no circle layout.
"""

from __future__ import annotations

import math

import numpy as np

from mrope._errors import LayoutError

_U = np.array([-1.0, 1.0, 0.0]) / math.sqrt(2.0)
"""First axis of the circle's plane, on ``(w, h, t)``."""
_V = np.array([-1.0, -1.0, 2.0]) / math.sqrt(6.0)
"""Second axis of the circle's plane: ``(1, 1, 1) / sqrt 3`` cross :data:`_U`."""


def check_one_frame(frames: int) -> None:
    """:class:`~mrope._errors.LayoutError` unless a block of ``frames`` frames has a circle layout (one)."""
    if frames != 1:
        raise LayoutError(
            f"the circle rule (Circle-RoPE) maps one frame onto a circle; got a block of {frames} frames "
            "(the authors' map_to_circle reads frame 0 only): use images, or videos of one temporal patch"
        )


def circle_template(frames: int, hh: int, ww: int, radius: float, alpha: float) -> np.ndarray:
    """Coordinates relative to the block start of a one-frame ``hh x ww`` grid under the circle rule:
    float64 ``[3, hh * ww]``, rows ``(t, h, w)``, raster order, in position units (``radius`` is the
    circle's radius; ``alpha`` in ``[0, 1]`` weighs the grid's own angle against the raster index's).

    ``frames`` other than 1 raises :class:`~mrope._errors.LayoutError`."""
    check_one_frame(frames)
    h = np.arange(hh, dtype=np.float64)[:, None] - (hh - 1) / 2.0
    w = np.arange(ww, dtype=np.float64)[None, :] - (ww - 1) / 2.0
    theta = np.arctan2(np.broadcast_to(h, (hh, ww)), np.broadcast_to(w, (hh, ww))).ravel()
    span = theta.max() - theta.min()
    if span > 0:
        theta = (theta - theta.min()) / span * (2.0 * math.pi)
    index = np.arange(hh * ww, dtype=np.float64) / (hh * ww) * (2.0 * math.pi)
    angle = alpha * theta + (1.0 - alpha) * index
    x, y = radius * np.cos(angle), radius * np.sin(angle)
    out = np.empty((3, hh * ww), dtype=np.float64)
    for row, axis in ((0, 2), (1, 1), (2, 0)):  # rows (t, h, w) from the plane's (w, h, t) components
        out[row] = x * _U[axis] + y * _V[axis]
    return out


__all__ = ["check_one_frame", "circle_template"]
