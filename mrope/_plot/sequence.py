"""The sequence section of the picture: the token axis, drawn as bands one below the other.

Top to bottom: the title and rules, a bar of span kinds, every segment's label, the t, h and w colour
strips on one value scale, a row marking tokens that share their whole ``(t, h, w)`` with another token,
the token index ticks, the value scale with the kind legend, and a chart of the three coordinates
against the token index. Each band is one function that draws from its top ``y`` (pixels) and returns
the next band's top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from mrope._plot.axis import MIN_SEGMENT_PX, TokenAxis, column_reduce, segment_bounds, value_knots
from mrope._plot.style import (
    AXIS_COLOURS,
    BACKGROUND,
    GRID_LINE,
    INK,
    KIND_COLOURS,
    LEFT,
    MUTED,
    RIGHT,
    SHARED,
    Fonts,
    colourise,
    nice_ticks,
    text_size,
)
from mrope._positions import Positions

STRIP_H, BAR_H, SHARED_H, CHART_H = 26, 20, 10, 190
"""Heights in pixels of a coordinate strip, the span bar, the shared row and the chart."""

LABEL_ROW_H = 15
"""Height in pixels of one row of segment labels."""


@dataclass
class _Band:
    """What every band draws with: the positions, the picture, the token axis (``cols``: the first token
    of each pixel column), the fonts, the top value ``vmax`` of the strips' scale, and ``rows``, where
    each band records its ``(top, bottom)`` pixel rows."""

    p: Positions
    img: PILImage.Image
    draw: ImageDraw.ImageDraw
    axis: TokenAxis
    cols: np.ndarray
    fonts: Fonts
    vmax: float
    rows: dict[str, tuple[int, int]]

    @property
    def n(self) -> int:
        """The number of tokens."""
        return self.p.num_tokens


def _segment_name(p: Positions, index: int) -> str:
    """The short label of segment ``index``: its index and its main kind (``"3 img"``)."""
    kinds = {s.kind for s in p.spans if s.index == index}
    kind = next(
        (k for k in ("video", "image", "audio", "text") if k in kinds), sorted(kinds)[0] if kinds else ""
    )
    short = {"video": "vid", "image": "img", "audio": "aud", "text": "txt"}.get(kind, kind[:3])
    return f"{index} {short}"


def _place_labels(
    draw: ImageDraw.ImageDraw,
    segments: list[tuple[int, int, int]],
    axis: TokenAxis,
    names: dict[int, str],
    font: Any,
) -> list[dict[str, Any]]:
    """Every segment's label, centred under it, in the first row where it overlaps no other label."""
    rows: list[list[tuple[int, int]]] = []
    placed = []
    right_edge = axis.x0 + axis.width
    for index, a, b in segments:
        text = names[index]
        tw, _ = text_size(draw, text, font)
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


def _header(b: _Band, title: str) -> int:
    """The title and the rules line; returns the next band's top."""
    y = 12
    b.draw.text((16, y), title, fill=INK, font=b.fonts.title)
    y += text_size(b.draw, title, b.fonts.title)[1] + 10
    r = b.p.rules
    subtitle = (
        f"rules: temporal={r.temporal}, spatial={r.spatial}, crop={r.crop}, tiles={r.tiles}, advance={r.advance}"
        f"  ·  tokens: by segment, each >= {MIN_SEGMENT_PX} px  ·  t, h, w on one scale 0 .. {b.vmax:g}"
    )
    b.draw.text((16, y), subtitle, fill=MUTED, font=b.fonts.small)
    return y + 22


def _span_bar(b: _Band, y: int, segments: list[tuple[int, int, int]]) -> int:
    """The span kind of every column, with a line at every segment boundary."""
    kinds = np.empty(max(b.n, 1), dtype=object)
    kinds[:] = "text"
    for s in b.p.spans:
        kinds[s.start : s.stop] = s.kind
    bar = np.array([KIND_COLOURS.get(k, INK) for k in kinds[b.cols]], dtype=np.uint8)
    b.img.paste(PILImage.fromarray(np.repeat(bar[None], BAR_H, axis=0)), (b.axis.x0, y))
    b.rows["span"] = (y, y + BAR_H)
    b.draw.text((16, y + 3), "span", fill=INK, font=b.fonts.text)
    for _, a, _ in segments[1:]:
        b.draw.line([(b.axis.x(a), y), (b.axis.x(a), y + BAR_H - 1)], fill=BACKGROUND)
    return y + BAR_H + 2


def _segment_labels(b: _Band, y: int, placed: list[dict[str, Any]], label_rows: int) -> int:
    """Every segment's label (index and kind), staggered into rows where labels would overlap; records
    each label's ``y0`` and ``y1`` in ``placed``."""
    b.rows["labels"] = (y, y + LABEL_ROW_H * label_rows)
    b.draw.text((16, y), "segment", fill=MUTED, font=b.fonts.small)
    for pl in placed:  # leader lines first, so no line crosses a label
        if pl["row"]:
            b.draw.line([(pl["centre"], y), (pl["centre"], y + LABEL_ROW_H * pl["row"] + 1)], fill=GRID_LINE)
    for pl in placed:
        ly = y + LABEL_ROW_H * pl["row"]
        b.draw.rectangle([pl["x0"] - 1, ly, pl["x1"] + 1, ly + 13], fill=BACKGROUND)
        b.draw.text((pl["x0"], ly), pl["text"], fill=INK, font=b.fonts.small)
        pl["y0"], pl["y1"] = ly, ly + 13
    return y + LABEL_ROW_H * label_rows + 4


def _coordinate_strips(b: _Band, y: int) -> int:
    """The t, h and w of every column as colour strips on one value scale ``0 .. vmax``."""
    for row, name in enumerate("thw"):
        b.rows[name] = (y, y + STRIP_H)
        colours = colourise(b.p.ids[row][b.cols] if b.n else np.zeros(b.axis.width), 0, b.vmax)
        b.img.paste(PILImage.fromarray(np.repeat(colours[None], STRIP_H, axis=0)), (b.axis.x0, y))
        b.draw.text((16, y + 5), name, fill=AXIS_COLOURS[name], font=b.fonts.text)
        y += STRIP_H + 2
    return y + 3


def _shared_row(b: _Band, y: int) -> tuple[int, int]:
    """The columns holding a token whose ``(t, h, w)`` another token also has; returns the next band's
    top and the number of such tokens."""
    n = b.n
    shared = np.zeros(max(n, 1), dtype=bool)
    if n:
        _, inverse, counts = np.unique(b.p.ids.T, axis=0, return_inverse=True, return_counts=True)
        shared[:n] = counts[inverse.reshape(-1)] > 1
    marks = (
        column_reduce(shared.astype(np.int8), b.axis, "max").astype(bool)
        if n
        else np.zeros(b.axis.width, bool)
    )
    b.rows["shared"] = (y, y + SHARED_H)
    row_px = np.where(marks[:, None], np.array(SHARED, np.uint8), np.array((240, 240, 240), np.uint8))
    b.img.paste(PILImage.fromarray(np.repeat(row_px[None], SHARED_H, axis=0)), (b.axis.x0, y))
    b.draw.text((16, y - 3), "shared", fill=INK, font=b.fonts.small)
    return y + SHARED_H + 3, int(shared[:n].sum())


def _token_ticks(b: _Band, y: int, segments: list[tuple[int, int, int]]) -> int:
    """Token index ticks at segment starts and at the last token, labelled where the labels fit."""
    b.draw.text((16, y + 3), "token", fill=MUTED, font=b.fonts.small)
    taken_until = -1
    for tick in [a for _, a, _ in segments] + [max(b.n - 1, 0)]:
        x = b.axis.x(tick)
        label = f"{tick:,}"
        tw, _ = text_size(b.draw, label, b.fonts.small)
        lx = min(max(x - tw // 2, b.axis.x0), b.axis.x0 + b.axis.width - tw)
        b.draw.line([(x, y), (x, y + 4)], fill=MUTED)
        if lx > taken_until + 6:
            b.draw.text((lx, y + 5), label, fill=MUTED, font=b.fonts.small)
            taken_until = lx + tw
    return y + 26


def _value_scale(b: _Band, y: int, n_shared: int) -> int:
    """The strips' value scale with its ticks, the span-kind legend and the shared-token count."""
    draw, small = b.draw, b.fonts.small
    grad = colourise(np.linspace(0, b.vmax, 256), 0, b.vmax)
    scale_w = min(360, b.axis.width)
    grad_img = PILImage.fromarray(np.repeat(grad[None], 12, axis=0)).resize((scale_w, 12), PILImage.NEAREST)
    b.img.paste(grad_img, (b.axis.x0, y))
    draw.text((16, y - 1), "value", fill=MUTED, font=small)
    for tick in nice_ticks(b.vmax, 5):
        x = b.axis.x0 + int(round(tick / b.vmax * (scale_w - 1)))
        draw.line([(x, y + 12), (x, y + 16)], fill=MUTED)
        draw.text((x - text_size(draw, str(tick), small)[0] // 2, y + 17), str(tick), fill=MUTED, font=small)
    legend_x = b.axis.x0 + scale_w + 30
    for kind, colour in KIND_COLOURS.items():
        draw.rectangle([legend_x, y, legend_x + 12, y + 12], fill=colour, outline=MUTED)
        draw.text((legend_x + 16, y - 1), kind, fill=INK, font=small)
        legend_x += 22 + text_size(draw, kind, small)[0] + 12
    note = (
        f"shared: {n_shared} tokens share their (t, h, w) with another token" if n_shared else "shared: none"
    )
    draw.text((b.axis.x0 + scale_w + 30, y + 18), note, fill=SHARED if n_shared else MUTED, font=small)
    return y + 44


def _chart(b: _Band, y: int) -> int:
    """The coordinates against the token index, both axes compressed by segment, its legend above."""
    draw, small, axis = b.draw, b.fonts.small, b.axis
    lx = axis.x0
    for name in "thw":
        draw.line([(lx, y + 7), (lx + 16, y + 7)], fill=AXIS_COLOURS[name], width=3)
        draw.text((lx + 20, y), name, fill=INK, font=small)
        lx += 44
    draw.text(
        (lx, y),
        "y: compressed by segment (each its own stretch, from its lowest value)",
        fill=MUTED,
        font=small,
    )
    top = y + 20
    b.rows["chart"] = (top, top + CHART_H)
    draw.text((16, top), "value", fill=MUTED, font=small)
    draw.rectangle([axis.x0, top, axis.x0 + axis.width, top + CHART_H], outline=GRID_LINE)
    knots_v, knots_f = value_knots(b.p) if b.n else (np.array([0.0, 1.0]), np.array([0.0, 1.0]))

    def y_of(values: Any) -> np.ndarray:
        frac = np.interp(np.asarray(values, dtype=np.float64), knots_v, knots_f)
        return top + CHART_H - np.round(frac * CHART_H).astype(np.int64)

    taken_above = top + CHART_H + 100
    for v in knots_v:  # a grid line at every segment's lowest value; labels where they fit
        if v > b.vmax:
            break
        yy = int(y_of(v))
        draw.line([(axis.x0, yy), (axis.x0 + axis.width, yy)], fill=GRID_LINE)
        if yy <= taken_above - 12:
            label = f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"
            tw = text_size(draw, label, small)[0]
            draw.text((axis.x0 - 6 - tw, yy - 6), label, fill=MUTED, font=small)
            taken_above = yy
    if b.n:
        _chart_lines(b, y_of)
    return top + CHART_H + 12


def _chart_lines(b: _Band, y_of: Any) -> None:
    """One line per coordinate (w, then h, then t on top): per pixel column, a vertical stroke over the
    values of its tokens that joins the previous column. ``y_of`` maps values to pixel rows."""
    n, ids, cols, axis = b.n, b.p.ids, b.cols, b.axis
    for row, name in ((2, "w"), (1, "h"), (0, "t")):
        lo = y_of(column_reduce(ids[row], axis, "min"))
        hi = y_of(column_reduce(ids[row], axis, "max"))
        last = y_of(ids[row][np.minimum(np.maximum(np.append(cols[1:], n) - 1, cols), n - 1)])
        prev = int(y_of(ids[row][0]))
        for x in range(axis.width):
            a, c = min(int(lo[x]), prev), max(int(hi[x]), prev)
            b.draw.line([(axis.x0 + x, c), (axis.x0 + x, a)], fill=AXIS_COLOURS[name], width=2)
            prev = int(last[x])


def sequence_section(
    p: Positions,
    width: int,
    fonts: Fonts,
    title: str,
    rows: dict[str, tuple[int, int]],
    geometry: dict[str, Any],
) -> PILImage.Image:
    """The sequence section of ``p``, ``width`` pixels wide. Fills ``rows`` with each band's
    ``(top, bottom)`` pixel rows and ``geometry`` with ``columns`` (the first token of each pixel
    column), ``segments`` (each segment's tokens and columns) and ``labels`` (each label's box)."""
    n = p.num_tokens
    vmax = max(float(p.ids.max()), 1.0) if n else 1.0
    segments = segment_bounds(p) if n else []
    axis = TokenAxis.build(LEFT, width - LEFT - RIGHT, n, [(a, c) for _, a, c in segments])
    # the picture's height: everything above the label rows, the label rows, the chart
    scratch = ImageDraw.Draw(PILImage.new("RGB", (8, 8)))
    names = {i: _segment_name(p, i) for i, _, _ in segments}
    placed = _place_labels(scratch, segments, axis, names, fonts.small)
    label_rows = 1 + max((pl["row"] for pl in placed), default=0)
    img = PILImage.new("RGB", (width, 620 + LABEL_ROW_H * label_rows), BACKGROUND)
    band = _Band(p, img, ImageDraw.Draw(img), axis, axis.columns(), fonts, vmax, rows)
    y = _header(band, title)
    y = _span_bar(band, y, segments)
    y = _segment_labels(band, y, placed, label_rows)
    y = _coordinate_strips(band, y)
    y, n_shared = _shared_row(band, y)
    y = _token_ticks(band, y, segments)
    y = _value_scale(band, y, n_shared)
    y = _chart(band, y)
    geometry["columns"] = band.cols
    geometry["segments"] = [
        {"segment": i, "start": a, "stop": c, "x0": axis.x(a), "x1": axis.x(c)} for i, a, c in segments
    ]
    geometry["labels"] = placed
    return img.crop((0, 0, width, y))


__all__ = ["sequence_section"]
