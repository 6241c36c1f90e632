"""A picture of M-RoPE coordinates, drawn with Pillow (no matplotlib).

:func:`render_layout` draws, top to bottom:

- the token sequence: a bar of span kinds (text, wrappers, timestamps, image, video, thumbnail), the t, h
  and w coordinates as three colour strips on one value scale, a row marking tokens that share their
  whole ``(t, h, w)`` with another token, and a chart of the three coordinates against the token index:
  jumps (text resuming past an image), resets (a block
  restarting at 0) and overlaps (two segments on the same values) show at a glance;
- every image (and tile grid, and the first frame of every video) as heat maps of its h and w, in the
  image's own geometry, tiles outlined and numbered in emission order, each map with its value range.

:func:`save_layout` writes the picture as a PNG.
"""

from __future__ import annotations

from mrope._extras import require

require("mrope.plot", "media", "PIL")

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw, ImageFont

from mrope.errors import LayoutError
from mrope.positions import Positions, Span

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
AXIS_COLOURS = {"t": (214, 39, 40), "h": (31, 119, 180), "w": (44, 160, 44)}
_LEFT, _RIGHT = 96, 24  # margins of the token axis
SHARED = (200, 0, 140)  # tokens sharing one (t, h, w): magenta, a colour nothing else uses

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
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
        return ImageFont.load_default()


@dataclass
class _Fonts:
    title: Any
    text: Any
    small: Any


def _text_size(draw: ImageDraw.ImageDraw, text: str, font: Any) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return int(right - left), int(bottom - top)


def _nice_ticks(hi: float, n: int = 6) -> list[int]:
    """Round tick values in ``[0, hi]``: multiples of 1, 2 or 5 times a power of ten."""
    if hi <= 0:
        return [0]
    raw = hi / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return list(range(0, int(hi) + 1, int(step)))


# ---------------------------------------------------------------------------------------- sequence


MIN_SEGMENT_PX = 8
"""Narrowest a segment is drawn on the token axis, however few tokens it has (when the width allows)."""


@dataclass
class _Axis:
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
    def build(cls, x0: int, width: int, n: int, bounds: Sequence[tuple[int, int]]) -> _Axis:
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
        return self.x0 + int(round(float(np.interp(token, self.knots_token, self.knots_px))))


def _segment_bounds(p: Positions) -> list[tuple[int, int, int]]:
    """``(index, start, stop)`` of every segment's tokens, in order (spans merged by segment)."""
    out: list[list[int]] = []
    for s in p.spans:
        if out and out[-1][0] == s.index and out[-1][2] == s.start:
            out[-1][2] = s.stop
        else:
            out.append([s.index, s.start, s.stop])
    return [(i, a, b) for i, a, b in out if b > a]


def _column_reduce(values: np.ndarray, axis: _Axis, how: str) -> np.ndarray:
    """Per pixel column, the max or min of ``values`` over the tokens the column covers."""
    starts = axis.columns()  # non-decreasing; equal neighbours mean a column of one token
    if how == "max":
        return np.maximum.reduceat(values, starts)
    return np.minimum.reduceat(values, starts)


MIN_SEGMENT_CHART_FRACTION = 0.1
"""Each segment's share of the chart height is at least this (or half the height over the segment
count, when there are more than five), the rest by value range."""


def _value_knots(p: Positions) -> tuple[np.ndarray, np.ndarray]:
    """The chart's compressed value axis: knots ``(value, height fraction)`` at every segment's lowest
    value. Every segment gets a minimum stretch of the height plus a share of the rest proportional
    to its value range, so a 32-value image next to a 2000-value video keeps a legible h and w."""
    vals = [float(p.ids[:, a:b].min()) for _, a, b in _segment_bounds(p)]
    vals.append(float(p.ids.max()) + 1.0)
    v = np.maximum.accumulate(np.asarray(vals))
    v = v[np.concatenate([[True], np.diff(v) > 0])]  # strictly increasing values for np.interp
    ranges = np.diff(v)
    n = ranges.size
    min_f = min(MIN_SEGMENT_CHART_FRACTION, 0.5 / max(n, 1))
    steps = min_f + (1.0 - n * min_f) * ranges / ranges.sum()
    return v, np.concatenate([[0.0], np.cumsum(steps)])


def _segment_name(p: Positions, index: int, labels: Sequence[str]) -> str:
    kinds = {s.kind for s in p.spans if s.index == index}
    kind = next(
        (k for k in ("video", "image", "audio", "text") if k in kinds), sorted(kinds)[0] if kinds else ""
    )
    short = {"video": "vid", "image": "img", "audio": "aud", "text": "txt"}.get(kind, kind[:3])
    return f"{index} {short}"


def _place_labels(
    draw: ImageDraw.ImageDraw,
    segments: list[tuple[int, int, int]],
    axis: _Axis,
    names: dict[int, str],
    font: Any,
) -> list[dict[str, Any]]:
    """Every segment's label, centred under it, in the first row where it overlaps no other label."""
    rows: list[list[tuple[int, int]]] = []
    placed = []
    right_edge = axis.x0 + axis.width
    for index, a, b in segments:
        text = names[index]
        tw, _ = _text_size(draw, text, font)
        centre = (axis.x(a) + axis.x(b)) // 2
        lx = min(max(centre - tw // 2, axis.x0), right_edge - tw)
        box = (lx - 2, lx + tw + 2)
        for r, taken in enumerate(rows):
            if all(box[1] < t0 or box[0] > t1 for t0, t1 in taken):
                taken.append(box)
                row = r
                break
        else:
            rows.append([box])
            row = len(rows) - 1
        placed.append({"segment": index, "text": text, "x0": lx, "x1": lx + tw, "row": row, "centre": centre})
    return placed


def _sequence_section(
    p: Positions,
    width: int,
    fonts: _Fonts,
    title: str,
    rows: dict[str, tuple[int, int]],
    labels: Sequence[str],
    geometry: dict[str, Any],
) -> PILImage.Image:
    ids = p.ids
    n = p.num_tokens
    vmax = max(float(ids.max()), 1.0) if n else 1.0
    segments = _segment_bounds(p) if n else []
    axis = _Axis.build(_LEFT, width - _LEFT - _RIGHT, n, [(a, b) for _, a, b in segments])
    strip_h, bar_h, shared_h, chart_h = 26, 20, 10, 190
    # the picture's height: everything above the label rows, the label rows, the chart
    scratch = ImageDraw.Draw(PILImage.new("RGB", (8, 8)))
    names = {i: _segment_name(p, i, labels) for i, _, _ in segments}
    placed = _place_labels(scratch, segments, axis, names, fonts.small)
    label_rows = 1 + max((pl["row"] for pl in placed), default=0)
    height = 620 + 15 * label_rows
    img = PILImage.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(img)
    y = 12
    draw.text((16, y), title, fill=INK, font=fonts.title)
    y += _text_size(draw, title, fonts.title)[1] + 10
    r = p.rules
    subtitle = (
        f"rules: temporal={r.temporal}, spatial={r.spatial}, crop={r.crop}, tiles={r.tiles}, advance={r.advance}"
        f"  ·  tokens: by segment, each >= {MIN_SEGMENT_PX} px  ·  t, h, w on one scale 0 .. {vmax:g}"
    )
    draw.text((16, y), subtitle, fill=MUTED, font=fonts.small)
    y += 22
    cols = axis.columns()

    # span kinds
    kinds = np.empty(max(n, 1), dtype=object)
    kinds[:] = "text"
    for s in p.spans:
        kinds[s.start : s.stop] = s.kind
    bar = np.array([KIND_COLOURS.get(k, INK) for k in kinds[cols]], dtype=np.uint8)
    img.paste(PILImage.fromarray(np.repeat(bar[None], bar_h, axis=0)), (axis.x0, y))
    rows["span"] = (y, y + bar_h)
    draw.text((16, y + 3), "span", fill=INK, font=fonts.text)
    for _, a, _ in segments[1:]:  # segment boundaries
        draw.line([(axis.x(a), y), (axis.x(a), y + bar_h - 1)], fill=BACKGROUND)
    y += bar_h + 2

    # every segment's label (index and kind), staggered into rows where labels would overlap
    rows["labels"] = (y, y + 15 * label_rows)
    draw.text((16, y), "segment", fill=MUTED, font=fonts.small)
    for pl in placed:  # leader lines first, so no line crosses a label
        if pl["row"]:
            draw.line([(pl["centre"], y), (pl["centre"], y + 15 * pl["row"] + 1)], fill=GRID_LINE)
    for pl in placed:
        ly = y + 15 * pl["row"]
        draw.rectangle([pl["x0"] - 1, ly, pl["x1"] + 1, ly + 13], fill=BACKGROUND)
        draw.text((pl["x0"], ly), pl["text"], fill=INK, font=fonts.small)
        pl["y0"], pl["y1"] = ly, ly + 13
    y += 15 * label_rows + 4

    # t, h, w strips
    for row, name in enumerate("thw"):
        rows[name] = (y, y + strip_h)
        colours = colourise(ids[row][cols] if n else np.zeros(axis.width), 0, vmax)
        img.paste(PILImage.fromarray(np.repeat(colours[None], strip_h, axis=0)), (axis.x0, y))
        draw.text((16, y + 5), name, fill=AXIS_COLOURS[name], font=fonts.text)
        y += strip_h + 2
    y += 3

    # tokens whose (t, h, w) another token also has
    shared = np.zeros(max(n, 1), dtype=bool)
    if n:
        _, inverse, counts = np.unique(ids.T, axis=0, return_inverse=True, return_counts=True)
        shared[:n] = counts[inverse.reshape(-1)] > 1
    marks = (
        _column_reduce(shared.astype(np.int8), axis, "max").astype(bool) if n else np.zeros(axis.width, bool)
    )
    rows["shared"] = (y, y + shared_h)
    row_px = np.where(marks[:, None], np.array(SHARED, np.uint8), np.array((240, 240, 240), np.uint8))
    img.paste(PILImage.fromarray(np.repeat(row_px[None], shared_h, axis=0)), (axis.x0, y))
    draw.text((16, y - 3), "shared", fill=INK, font=fonts.small)
    n_shared = int(shared[:n].sum())
    y += shared_h + 3

    # token index ticks at segment starts (those that fit), and the last token
    draw.text((16, y + 3), "token", fill=MUTED, font=fonts.small)
    taken_until = -1
    for tick in [a for _, a, _ in segments] + [max(n - 1, 0)]:
        x = axis.x(tick)
        label = f"{tick:,}"
        tw, _ = _text_size(draw, label, fonts.small)
        lx = min(max(x - tw // 2, axis.x0), axis.x0 + axis.width - tw)
        draw.line([(x, y), (x, y + 4)], fill=MUTED)
        if lx > taken_until + 6:
            draw.text((lx, y + 5), label, fill=MUTED, font=fonts.small)
            taken_until = lx + tw
    y += 26

    # value scale
    grad = colourise(np.linspace(0, vmax, 256), 0, vmax)
    scale_w = min(360, axis.width)
    grad_img = PILImage.fromarray(np.repeat(grad[None], 12, axis=0)).resize((scale_w, 12), PILImage.NEAREST)
    img.paste(grad_img, (axis.x0, y))
    draw.text((16, y - 1), "value", fill=MUTED, font=fonts.small)
    for tick in _nice_ticks(vmax, 5):
        x = axis.x0 + int(round(tick / vmax * (scale_w - 1)))
        draw.line([(x, y + 12), (x, y + 16)], fill=MUTED)
        draw.text(
            (x - _text_size(draw, str(tick), fonts.small)[0] // 2, y + 17),
            str(tick),
            fill=MUTED,
            font=fonts.small,
        )
    legend_x = axis.x0 + scale_w + 30
    for kind, colour in KIND_COLOURS.items():
        draw.rectangle([legend_x, y, legend_x + 12, y + 12], fill=colour, outline=MUTED)
        draw.text((legend_x + 16, y - 1), kind, fill=INK, font=fonts.small)
        legend_x += 22 + _text_size(draw, kind, fonts.small)[0] + 12
    note = (
        f"shared: {n_shared} tokens share their (t, h, w) with another token" if n_shared else "shared: none"
    )
    draw.text((axis.x0 + scale_w + 30, y + 18), note, fill=SHARED if n_shared else MUTED, font=fonts.small)
    y += 44

    # coordinates against the token index, both axes compressed by segment; the legend above the box
    lx = axis.x0
    for name in "thw":
        draw.line([(lx, y + 7), (lx + 16, y + 7)], fill=AXIS_COLOURS[name], width=3)
        draw.text((lx + 20, y), name, fill=INK, font=fonts.small)
        lx += 44
    draw.text(
        (lx, y),
        "y: compressed by segment (each its own stretch, from its lowest value)",
        fill=MUTED,
        font=fonts.small,
    )
    top = y + 20
    rows["chart"] = (top, top + chart_h)
    draw.text((16, top), "value", fill=MUTED, font=fonts.small)
    draw.rectangle([axis.x0, top, axis.x0 + axis.width, top + chart_h], outline=GRID_LINE)
    knots_v, knots_f = _value_knots(p) if n else (np.array([0.0, 1.0]), np.array([0.0, 1.0]))

    def y_of(values: Any) -> np.ndarray:
        frac = np.interp(np.asarray(values, dtype=np.float64), knots_v, knots_f)
        return top + chart_h - np.round(frac * chart_h).astype(np.int64)

    taken_above = top + chart_h + 100
    for v in knots_v:  # a grid line at every segment's lowest value; labels where they fit
        if v > vmax:
            break
        yy = int(y_of(v))
        draw.line([(axis.x0, yy), (axis.x0 + axis.width, yy)], fill=GRID_LINE)
        if yy <= taken_above - 12:
            label = f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"
            tw = _text_size(draw, label, fonts.small)[0]
            draw.text((axis.x0 - 6 - tw, yy - 6), label, fill=MUTED, font=fonts.small)
            taken_above = yy
    if n:
        for row, name in ((2, "w"), (1, "h"), (0, "t")):
            lo = y_of(_column_reduce(ids[row], axis, "min"))
            hi = y_of(_column_reduce(ids[row], axis, "max"))
            last = y_of(ids[row][np.minimum(np.maximum(np.append(cols[1:], n) - 1, cols), n - 1)])
            prev = int(y_of(ids[row][0]))
            for x in range(axis.width):
                # one vertical stroke per column covering its tokens and joining the previous column
                a, b = min(int(lo[x]), prev), max(int(hi[x]), prev)
                draw.line([(axis.x0 + x, b), (axis.x0 + x, a)], fill=AXIS_COLOURS[name], width=2)
                prev = int(last[x])
    y = top + chart_h + 12
    geometry["columns"] = cols
    geometry["segments"] = [
        {"segment": i, "start": a, "stop": b, "x0": axis.x(a), "x1": axis.x(b)} for i, a, b in segments
    ]
    geometry["labels"] = placed
    return img.crop((0, 0, width, y))


# ------------------------------------------------------------------------------------------- grids


@dataclass
class VisionMap:
    """One heat-map panel: the h and w of a vision block's tokens in the block's own geometry.

    Attributes:
        caption: segment, kind, label, grid size and tiling.
        h, w: int64 ``[rows, cols]`` maps; tiles sit at their (row, col) of the untiled grid; -1 where no
            token is (never, for complete tilings).
        tiles: ``(row0, col0, rows, cols, emission order)`` of every tile.
        t_values: the t of every temporal patch (videos; the maps show the first patch).
        footer: a line under the maps (the tile emission order).
    """

    caption: str
    h: np.ndarray  # int64 [rows, cols]
    w: np.ndarray
    tiles: list[tuple[int, int, int, int, int]]  # (row0, col0, rows, cols, emission order)
    t_values: list[float]  # t of each temporal patch (videos; ints but for fractional time)
    footer: str = ""  # a line under the maps (tile emission order)


def _place(
    p: Positions, spans: Sequence[Span]
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int, int, int]]]:
    """h and w maps of an image's spans (tiles placed at their (row, col) in the untiled geometry)."""
    th, tw = spans[0].grid[1], spans[0].grid[2]
    rows = max((s.tile[0] + 1) * th if s.tile else th for s in spans)
    cols = max((s.tile[1] + 1) * tw if s.tile else tw for s in spans)
    h = np.full((rows, cols), -1, dtype=np.int64)
    w = np.full((rows, cols), -1, dtype=np.int64)
    tiles = []
    for k, s in enumerate(spans):
        r0, c0 = (s.tile[0] * th, s.tile[1] * tw) if s.tile else (0, 0)
        block = p.ids[:, s.start : s.start + th * tw].reshape(3, th, tw)
        h[r0 : r0 + th, c0 : c0 + tw] = block[1]
        w[r0 : r0 + th, c0 : c0 + tw] = block[2]
        if s.tile is not None:
            tiles.append((r0, c0, th, tw, k))
    return h, w, tiles


def vision_maps(p: Positions, labels: Sequence[str] = ()) -> list[VisionMap]:
    """The heat-map panels of ``p``: one per image (its tiles placed together), thumbnail and video."""
    by_segment: dict[tuple[int, str], list[Span]] = {}
    for s in p.spans:
        if s.kind in ("image", "video", "thumbnail") and s.grid is not None:
            by_segment.setdefault((s.index, s.kind), []).append(s)
    out = []
    for (index, kind), spans in by_segment.items():
        label = labels[index] if index < len(labels) and labels[index] else ""
        name = f"segment {index} · {kind}" + (f" · {label}" if label else "")
        if kind == "video":
            first = spans[0]
            _, hh, ww = first.grid
            per = hh * ww
            block = p.ids[:, first.start : first.start + per].reshape(3, hh, ww)
            t_values = [v.item() for s in spans for v in p.ids[0, s.start : s.stop : per]]
            caption = f"{name} · {len(t_values)} patches of {hh}x{ww} (first shown)"
            out.append(VisionMap(caption, block[1], block[2], [], t_values))
            continue
        h, w, tiles = _place(p, spans)
        caption = f"{name} · {h.shape[0]}x{h.shape[1]}"
        order = ""
        if tiles:
            n_rows = max(r for r, _, _, _, _ in tiles) // tiles[0][2] + 1
            n_cols = max(c for _, c, _, _, _ in tiles) // tiles[0][3] + 1
            caption += f" · {n_cols}x{n_rows} tiles ({p.rules.tiles})"
            order = "tile order: " + ", ".join(
                f"r{s.tile[0]}c{s.tile[1]}" for s in spans if s.tile is not None
            )
        out.append(VisionMap(caption, h, w, tiles, [], order))
    return out


def _heat(
    draw: ImageDraw.ImageDraw,
    img: PILImage.Image,
    values: np.ndarray,
    x: int,
    y: int,
    cell: int,
    name: str,
    tiles: Sequence[tuple[int, int, int, int, int]],
    fonts: _Fonts,
) -> None:
    valid = values >= 0
    lo, hi = (int(values[valid].min()), int(values[valid].max())) if valid.any() else (0, 1)
    rgb = colourise(values, lo, hi if hi > lo else lo + 1)
    rgb[~valid] = (235, 235, 235)
    big = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    img.paste(PILImage.fromarray(big), (x, y))
    rows, cols = values.shape
    if cell >= 20:
        for r in range(rows):
            for c in range(cols):
                if not valid[r, c]:
                    continue
                v = int(values[r, c])
                text = str(v)
                tw, th = _text_size(draw, text, fonts.small)
                if tw > cell - 2:
                    continue
                bright = (v - lo) / max(hi - lo, 1) > 0.6
                draw.text(
                    (x + c * cell + (cell - tw) // 2, y + r * cell + (cell - th) // 2 - 2),
                    text,
                    fill=INK if bright else BACKGROUND,
                    font=fonts.small,
                )
    for r0, c0, tr, tc, k in tiles:
        box = [x + c0 * cell, y + r0 * cell, x + (c0 + tc) * cell - 1, y + (r0 + tr) * cell - 1]
        draw.rectangle(box, outline=BACKGROUND, width=2)
        if cell < 20 and tc * cell >= 24 and tr * cell >= 18:  # no values drawn: room for the order badge
            bw, _ = _text_size(draw, f"#{k}", fonts.small)
            draw.rectangle([box[0] + 2, box[1] + 2, box[0] + bw + 6, box[1] + 16], fill=INK)
            draw.text((box[0] + 4, box[1] + 2), f"#{k}", fill=BACKGROUND, font=fonts.small)
    draw.rectangle([x - 1, y - 1, x + cols * cell, y + rows * cell], outline=MUTED)
    # the map's own value scale: a small gradient with its two ends
    sy = y + rows * cell + 6
    grad = colourise(np.linspace(lo, hi, 64), lo, hi if hi > lo else lo + 1)
    img.paste(PILImage.fromarray(np.repeat(grad[None], 8, axis=0)), (x + 14, sy + 2))
    draw.text((x, sy - 2), name, fill=AXIS_COLOURS[name], font=fonts.text)
    draw.text((x + 82, sy - 2), f"{lo} .. {hi}", fill=INK, font=fonts.small)


def _grid_section(
    grids: Sequence[VisionMap], width: int, fonts: _Fonts, max_panels: int
) -> PILImage.Image | None:
    if not grids:
        return None
    shown = list(grids[:max_panels])
    margin, gap = 16, 28
    usable = width - 2 * margin
    # every map of a panel gets the same cell size; a panel holds an h map and a w map side by side
    layouts = []
    for g in shown:
        rows, cols = g.h.shape
        cell = max(2, min(26, (usable - gap) // (2 * cols), 320 // max(rows, 1)))
        map_w = max(cols * cell, 150)
        panel_w = 2 * map_w + gap
        panel_h = 22 + rows * cell + 24 + (26 if g.t_values or g.footer else 0)
        layouts.append((g, cell, map_w, panel_w, panel_h))
    # flow panels left to right, wrapping
    placed, x, y, row_h = [], margin, 34, 0
    for g, cell, map_w, panel_w, panel_h in layouts:
        if x > margin and x + panel_w > width - margin:
            x, y, row_h = margin, y + row_h + 18, 0
        placed.append((g, cell, map_w, x, y))
        x += panel_w + 40
        row_h = max(row_h, panel_h)
    height = y + row_h + 16 + (18 if len(grids) > len(shown) else 0)
    img = PILImage.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(img)
    draw.line([(margin, 4), (width - margin, 4)], fill=GRID_LINE)
    draw.text(
        (margin, 10),
        "vision grids: h and w of every token in the image's own geometry (each map on its own scale; "
        "tiles outlined in white)",
        fill=MUTED,
        font=fonts.small,
    )
    for g, cell, map_w, x, y in placed:
        caption = (
            g.caption if _text_size(draw, g.caption, fonts.text)[0] < 2 * map_w + 20 else g.caption[:60] + "…"
        )
        draw.text((x, y), caption, fill=INK, font=fonts.text)
        _heat(draw, img, g.h, x, y + 22, cell, "h", g.tiles, fonts)
        _heat(draw, img, g.w, x + map_w + 28, y + 22, cell, "w", g.tiles, fonts)
        if g.t_values:
            ty = y + 22 + g.h.shape[0] * cell + 26
            shown_t = g.t_values[:40]
            text = (
                "t per patch: "
                + ", ".join(f"{v:g}" for v in shown_t)
                + (" …" if len(g.t_values) > 40 else "")
            )
            draw.text((x, ty), text, fill=AXIS_COLOURS["t"], font=fonts.small)
        elif g.footer:
            ty = y + 22 + g.h.shape[0] * cell + 26
            text = g.footer if len(g.footer) <= 90 else g.footer[:89] + "…"
            draw.text((x, ty), text, fill=MUTED, font=fonts.small)
    if len(grids) > len(shown):
        draw.text(
            (margin, height - 20),
            f"… {len(grids) - len(shown)} more grids not shown",
            fill=MUTED,
            font=fonts.small,
        )
    return img


# --------------------------------------------------------------------------------------------- API


def render_layout(
    positions: Positions,
    *,
    width: int = 1200,
    title: str | None = None,
    labels: Sequence[str] | None = None,
    max_panels: int = 8,
) -> PILImage.Image:
    """A picture of ``positions``: the sequence strips and chart, then the vision heat maps.

    Args:
        positions: what :func:`mrope.build_positions` returned.
        width: picture width in pixels (at least 600); the height follows from the content.
        title: the headline (default: preset, token count, delta, max position).
        labels: one short description per segment (file names), used in the heat-map captions.
        max_panels: most heat-map panels drawn (the rest are counted).

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
    fonts = _Fonts(_font(18), _font(14), _font(12))
    n = positions.num_tokens
    top = positions.ids.max().item() if n else -1
    if title is None:
        title = f"{positions.rules.name}: {n} tokens, max position {top:g}, delta {positions.delta:g}"
    rows: dict[str, tuple[int, int]] = {}
    geometry: dict[str, Any] = {}
    parts = [_sequence_section(positions, width, fonts, title, rows, labels or (), geometry)]
    grids = _grid_section(vision_maps(positions, labels or ()), width, fonts, max_panels)
    if grids is not None:
        parts.append(grids)
    out = PILImage.new("RGB", (width, sum(p.height for p in parts)), BACKGROUND)
    y = 0
    for part in parts:
        out.paste(part, (0, y))
        y += part.height
    out.info["mrope_layout"] = {"x0": _LEFT, "width": width - _LEFT - _RIGHT, "rows": rows, **geometry}
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
    "render_layout",
    "save_layout",
    "vision_maps",
]
