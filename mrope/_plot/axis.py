"""The sequence picture's two compressed axes: token index -> pixel column, and value -> chart height.

Both are piecewise linear by segment, so a 12-token prompt next to a 1M-token video, or a 32-value image
next to a 2000-value video, stays legible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mrope._positions import Positions

MIN_SEGMENT_PX = 8
"""Narrowest a segment is drawn on the token axis, however few tokens it has (when the width allows)."""

MIN_SEGMENT_CHART_FRACTION = 0.1
"""Each segment's share of the chart height is at least this (or half the height over the segment
count, when there are more than five), the rest by value range."""


@dataclass
class TokenAxis:
    """Maps token indices to pixel columns ``[x0, x0 + width)``, piecewise linear by segment.

    Every segment gets ``min_px`` columns plus a share of the rest proportional to its tokens, so a
    12-token prompt next to a 1M-token video stays visible. ``knots_token`` / ``knots_px`` are the
    segment boundaries (token index -> column offset), increasing.
    """

    x0: int
    width: int
    n: int
    knots_token: np.ndarray  # float64 [K]
    knots_px: np.ndarray  # float64 [K]

    @classmethod
    def build(cls, x0: int, width: int, n: int, bounds: Sequence[tuple[int, int]]) -> TokenAxis:
        """The axis of ``n`` tokens over ``width`` columns from ``x0``, ``bounds`` the segments'
        ``(start, stop)`` token ranges in order."""
        if n == 0 or not bounds:
            return cls(x0, width, max(n, 1), np.array([0.0, max(n, 1)]), np.array([0.0, float(width)]))
        sizes = np.array([b - a for a, b in bounds], dtype=np.float64)
        min_px = min(float(MIN_SEGMENT_PX), width / len(bounds))
        px = min_px + (width - min_px * len(bounds)) * sizes / max(sizes.sum(), 1.0)
        knots_px = np.concatenate([[0.0], np.cumsum(px)])
        knots_token = np.array([bounds[0][0]] + [b for _, b in bounds], dtype=np.float64)
        return cls(x0, width, n, knots_token, knots_px)

    def columns(self) -> np.ndarray:
        """The first token shown in each pixel column (int64 ``[width]``, non-decreasing)."""
        tok = np.interp(np.arange(self.width) + 1e-9, self.knots_px, self.knots_token)
        return np.minimum(np.floor(tok).astype(np.int64), max(self.n - 1, 0))

    def x(self, token: float) -> int:
        """The pixel column of token index ``token``."""
        return self.x0 + int(round(float(np.interp(token, self.knots_token, self.knots_px))))


def segment_bounds(p: Positions) -> list[tuple[int, int, int]]:
    """``(index, start, stop)`` of every segment's tokens, in order (spans merged by segment)."""
    out: list[list[int]] = []
    for s in p.spans:
        if out and out[-1][0] == s.index and out[-1][2] == s.start:
            out[-1][2] = s.stop
        else:
            out.append([s.index, s.start, s.stop])
    return [(i, a, b) for i, a, b in out if b > a]


def column_reduce(values: np.ndarray, axis: TokenAxis, how: str) -> np.ndarray:
    """Per pixel column, the max (``how="max"``) or min of ``values`` over the tokens the column covers."""
    starts = axis.columns()  # non-decreasing; equal neighbours mean a column of one token
    if how == "max":
        return np.maximum.reduceat(values, starts)
    return np.minimum.reduceat(values, starts)


def value_knots(p: Positions) -> tuple[np.ndarray, np.ndarray]:
    """The chart's compressed value axis: knots ``(value, height fraction)`` at every segment's lowest
    value. Every segment gets a minimum stretch of the height plus a share of the rest proportional
    to its value range, so a 32-value image next to a 2000-value video keeps a legible h and w."""
    vals = [float(p.ids[:, a:b].min()) for _, a, b in segment_bounds(p)]
    vals.append(float(p.ids.max()) + 1.0)
    v = np.maximum.accumulate(np.asarray(vals))
    v = v[np.concatenate([[True], np.diff(v) > 0])]  # strictly increasing values for np.interp
    ranges = np.diff(v)
    n = ranges.size
    min_f = min(MIN_SEGMENT_CHART_FRACTION, 0.5 / max(n, 1))
    steps = min_f + (1.0 - n * min_f) * ranges / ranges.sum()
    return v, np.concatenate([[0.0], np.cumsum(steps)])
