"""InternVL dynamic tiling: how many 448-pixel tiles an image is cut into.

The rule, exactly as InternVL's ``dynamic_preprocess`` / ``find_closest_aspect_ratio`` apply it
(github.com/OpenGVLab/InternVL, internvl_chat/internvl/train/dataset.py):
candidates ``(cols, rows)`` with ``min_tiles <= cols * rows <= max_tiles``, sorted by area (a stable sort
of the same Python set InternVL builds, so equal-area candidates keep its order); the winner has the
smallest ``|w / h - cols / rows|``; on an exact tie a later candidate replaces the winner only if
``w * h > 0.5 * tile_size**2 * cols * rows`` (a large image takes the larger grid). The image is then
resized to ``(tile_size * cols, tile_size * rows)`` (w x h) and cut row-major; with a thumbnail and more
than one tile, a ``tile_size`` square thumbnail of the whole image follows the tiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from mrope._caches import cached
from mrope._errors import MediaError

MAX_TILES_LIMIT = 64
"""Largest ``max_tiles`` accepted (the candidate set grows with its cube)."""


def _count(value: Any, name: str, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise MediaError(f"{name} must be an int {bound}; got {value!r}")
    return value


@cached("media.tile_candidates", maxsize=64)
def _candidates(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    # Built exactly like InternVL (same set, same insertion order), so that the stable sort by area
    # leaves equal-area candidates in the order InternVL sees them.
    target_ratios = {
        (i, j)
        for n in range(min_tiles, max_tiles + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_tiles <= i * j <= max_tiles
    }
    return tuple(sorted(target_ratios, key=lambda x: x[0] * x[1]))


def plan_tiles(
    height: int, width: int, tile_size: int = 448, min_tiles: int = 1, max_tiles: int = 12
) -> tuple[int, int]:
    """The tile grid InternVL picks for an image of ``height x width`` pixels.

    Args:
        height, width: image size in pixels (after EXIF orientation).
        tile_size: tile side in pixels.
        min_tiles, max_tiles: bounds on ``cols * rows`` (``1 <= min_tiles <= max_tiles <= 64``).

    Returns:
        ``(cols, rows)``: the image is resized to ``(tile_size * rows, tile_size * cols)`` pixels (h x w).

    Raises:
        MediaError: non-positive sizes or out-of-range bounds.
    """
    height = _count(height, "height", 1)
    width = _count(width, "width", 1)
    tile_size = _count(tile_size, "tile_size", 1)
    max_tiles = _count(max_tiles, "max_tiles", 1, MAX_TILES_LIMIT)
    min_tiles = _count(min_tiles, "min_tiles", 1, max_tiles)
    aspect_ratio = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for cols, rows in _candidates(min_tiles, max_tiles):
        diff = abs(aspect_ratio - cols / rows)
        if diff < best_diff:
            best_diff = diff
            best = (cols, rows)
        elif diff == best_diff and area > 0.5 * tile_size * tile_size * cols * rows:
            best = (cols, rows)
    return best


@dataclass(frozen=True)
class TilePlan:
    """Tiling options for :func:`mrope.media.load_image`.

    Attributes:
        tile_size: tile side in pixels; it must be a multiple of the model's resize factor (patch size
            times merge size, 28 or 32) so that a tile is a whole number of merged tokens
            (448 = 16 x 28 = 14 x 32 works for every preset).
        min_tiles, max_tiles: bounds on the number of tiles.
        thumbnail: add a thumbnail (one tile's size) after the tiles when there is more than one tile.
    """

    tile_size: int = 448
    min_tiles: int = 1
    max_tiles: int = 12
    thumbnail: bool = True

    def __post_init__(self) -> None:
        _count(self.tile_size, "TilePlan.tile_size", 1)
        _count(self.max_tiles, "TilePlan.max_tiles", 1, MAX_TILES_LIMIT)
        _count(self.min_tiles, "TilePlan.min_tiles", 1, self.max_tiles)
        if not isinstance(self.thumbnail, bool):
            raise MediaError(f"TilePlan.thumbnail must be a bool; got {self.thumbnail!r}")

    @classmethod
    def coerce(cls, value: Any) -> TilePlan | None:
        """``None`` / ``False`` (no tiling), ``True`` (defaults), a dict of fields, or a :class:`TilePlan`."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, TilePlan):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise MediaError(f"unknown tiling options {unknown}; expected some of {sorted(known)}")
            return cls(**dict(value))
        raise MediaError(
            f"tiling must be None, True, a dict of {{tile_size, min_tiles, max_tiles, thumbnail}} or a "
            f"TilePlan; got {type(value).__name__}"
        )

    def select(self, height: int, width: int) -> tuple[int, int]:
        """``(cols, rows)`` for an image of ``height x width`` pixels (see :func:`plan_tiles`)."""
        return plan_tiles(height, width, self.tile_size, self.min_tiles, self.max_tiles)

    def has_thumbnail(self, cols: int, rows: int) -> bool:
        """Whether a thumbnail follows ``cols x rows`` tiles: only with more than one tile."""
        return self.thumbnail and cols * rows > 1
