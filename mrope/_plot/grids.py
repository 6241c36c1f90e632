"""The vision-grid panels: every image, tile grid and video's first patch as heat maps of its h and w.

:func:`vision_maps` lays a block's tokens out in the block's own geometry (tiles at their row and column
of the untiled grid); :func:`grid_section` draws the panels, each map on its own viridis scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from mrope._plot.style import AXIS_COLOURS, BACKGROUND, GRID_LINE, INK, MUTED, Fonts, colourise, text_size
from mrope._positions import Positions, Span


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
    fonts: Fonts,
) -> None:
    """One heat map of ``values`` (int64 ``[rows, cols]``, -1 where no token is) at ``(x, y)``, ``cell``
    pixels a token, with its values when they fit, its tiles outlined and its own value scale."""
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
                tw, th = text_size(draw, text, fonts.small)
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
            bw, _ = text_size(draw, f"#{k}", fonts.small)
            draw.rectangle([box[0] + 2, box[1] + 2, box[0] + bw + 6, box[1] + 16], fill=INK)
            draw.text((box[0] + 4, box[1] + 2), f"#{k}", fill=BACKGROUND, font=fonts.small)
    draw.rectangle([x - 1, y - 1, x + cols * cell, y + rows * cell], outline=MUTED)
    # the map's own value scale: a small gradient with its two ends
    sy = y + rows * cell + 6
    grad = colourise(np.linspace(lo, hi, 64), lo, hi if hi > lo else lo + 1)
    img.paste(PILImage.fromarray(np.repeat(grad[None], 8, axis=0)), (x + 14, sy + 2))
    draw.text((x, sy - 2), name, fill=AXIS_COLOURS[name], font=fonts.text)
    draw.text((x + 82, sy - 2), f"{lo} .. {hi}", fill=INK, font=fonts.small)


def grid_section(
    grids: Sequence[VisionMap], width: int, fonts: Fonts, max_panels: int
) -> PILImage.Image | None:
    """The panels of ``grids`` (at most ``max_panels``, the rest counted) flowed left to right in a
    picture ``width`` pixels wide, or ``None`` without any."""
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
            g.caption if text_size(draw, g.caption, fonts.text)[0] < 2 * map_w + 20 else g.caption[:60] + "…"
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


__all__ = ["VisionMap", "grid_section", "vision_maps"]
