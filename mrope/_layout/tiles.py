"""The blocks of a tiled image (``Image(tiles=...)``) under the rules' ``tiles`` rule.

``"global"``: one block whose tiles take their (h, w) in the untiled grid; ``"independent"``: each tile a
block of its own; ``"thumbnail"`` (RoPE-DHR): each tile token takes the position of the thumbnail token
over it, so the image spans the thumbnail's positions alone. The thumbnail, when the image has one,
follows the tiles as a block of one tile's size.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mrope._errors import LayoutError
from mrope._layout.pieces import Block, sequential_step, spatial_offset, untiled_block
from mrope._rules import LayoutRules

THUMBNAIL_SPAN_MARGIN = 1e-6
"""How far inside the end of its span of the thumbnail a tile's last row (column) lands before it is
rounded down: CoMemo's ``ORIGINAL_SIZE / X - 1e-6`` (LALBJ/CoMemo@d2d9d2f
comemo/model/comemo_chat/modeling_comemo_chat.py:56-57)."""


def tile_blocks(
    merged: tuple[int, int, int],
    tiles: tuple[int, int],
    order: np.ndarray,
    tau: np.ndarray,
    rules: LayoutRules,
    index: int,
    origin: tuple[int, int],
    thumbnail: bool,
) -> list[Block]:
    """The blocks of image ``index`` of LLM grid ``merged`` cut into ``tiles`` ``(columns, rows)`` of equal
    size, emitted in ``order`` (row-major tile indices), then its thumbnail when ``thumbnail``."""
    cols, rows = tiles
    _, hh, ww = merged
    th, tw = hh // rows, ww // cols
    tile_rc = [(int(i) // cols, int(i) % cols) for i in order]
    thumb = untiled_block((1, th, tw), tau, rules, "thumbnail", index, rules.image_pad_id)
    if rules.tiles == "global":
        h0, w0 = spatial_offset(hh, ww, rules, origin)
        anchored = rules.spatial != "reset"
        blocks = [
            Block(
                tau,
                th,
                tw,
                (order // cols) * th,
                (order % cols) * tw,
                h0,
                w0,
                hh,
                ww,
                "image",
                index,
                rules.image_pad_id,
                tile_rc,
                anchored=anchored,
                step=sequential_step(rules),
            )
        ]
    elif rules.tiles == "thumbnail":
        if not thumbnail:
            raise LayoutError(
                f"image (segment {index}): tiles='thumbnail' gives each tile token the position of the "
                "thumbnail token over it; the image needs its thumbnail (Image(..., thumbnail=True))"
            )
        blocks = [
            replace(thumb, kind="image", tiles=[rc], gather=thumbnail_cover(rc, tiles, (th, tw)))
            for rc in tile_rc
        ]
    else:
        blocks = []
        for rc in tile_rc:
            block = untiled_block((1, th, tw), tau, rules, "image", index, rules.image_pad_id, origin)
            block.tiles = [rc]
            blocks.append(block)
    return [*blocks, thumb] if thumbnail else blocks


def thumbnail_cover(rc: tuple[int, int], tiles: tuple[int, int], side: tuple[int, int]) -> np.ndarray:
    """The thumbnail token (row-major index in a ``side`` ``(th, tw)`` thumbnail) over each token of tile
    ``rc`` ``(row, col)`` of ``tiles`` ``(columns, rows)``, tile tokens row-major: int64 ``[th * tw]``.

    The tile's ``th`` rows spread evenly over its span of the thumbnail's rows, both ends included (the
    end just inside by :data:`THUMBNAIL_SPAN_MARGIN`), and are rounded down; columns alike (CoMemo's
    RoPE-DHR, modeling_comemo_chat.py:58-72, ``np.linspace`` then ``int``)."""
    (row, col), (cols, rows), (th, tw) = rc, tiles, side
    span_h, span_w = th / rows - THUMBNAIL_SPAN_MARGIN, tw / cols - THUMBNAIL_SPAN_MARGIN
    rows_at = np.linspace(row * span_h, (row + 1) * span_h, th).astype(np.int64)
    cols_at = np.linspace(col * span_w, (col + 1) * span_w, tw).astype(np.int64)
    return (rows_at[:, None] * tw + cols_at[None, :]).reshape(-1)


__all__ = ["THUMBNAIL_SPAN_MARGIN", "thumbnail_cover", "tile_blocks"]
