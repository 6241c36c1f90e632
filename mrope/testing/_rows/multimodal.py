"""The multimodal rows: a crop with its origin, tiles in any order, frames resampled, checked on the
coordinates mrope builds under the model's rules and the q.k scores of the config's rotary spec.

Each calls an assertion of :mod:`mrope.testing._invariance`; a row whose arrangement the family's rules
do not have (no tiles in one grid, a time coordinate that counts patches, no videos) does not apply.
"""

from __future__ import annotations

from collections.abc import Callable

from mrope._errors import MRopeError
from mrope._segments import Image, Text, Video
from mrope.testing._invariance import (
    assert_crop_invariant,
    assert_frame_order_invariant,
    assert_tile_invariant,
    assert_time_aligned,
)
from mrope.testing._report import FAIL, NOT_APPLICABLE, PASS, RowResult
from mrope.testing._rows.subject import Subject

TILE_ORDERS = (None, (3, 1, 5, 0, 2, 4))
"""Tile orders of the tile row: the raster order, and a shuffle of the 3 x 2 tiles."""


def _run(name: str, subject: Subject, check: Callable[[], str | RowResult]) -> RowResult:
    """``check()`` -> pass with its text (or its own result); an AssertionError fails; rules that cannot
    build the arrangement do not apply."""
    if subject.rules is None:
        return RowResult(name, NOT_APPLICABLE, f"no layout rules for this model: {subject.rules_error}")
    try:
        out = check()
        return out if isinstance(out, RowResult) else RowResult(name, PASS, out)
    except AssertionError as exc:
        return RowResult(name, FAIL, " ".join(str(exc).split()))
    except MRopeError as exc:
        return RowResult(name, NOT_APPLICABLE, f"the {subject.rules.name!r} rules cannot build it: {exc}")


def crop(subject: Subject, quick: bool) -> RowResult:
    """A merge-aligned crop carrying its origin scores like the same region of the whole image."""

    def check() -> str | RowResult:
        m = subject.rules.merge_size
        origin = (3, 2)
        whole = subject.positions([Text(subject.text(4, 20)), Image(grid=(1, 6 * m, 8 * m))])
        part = subject.positions([Text(subject.text(4, 20)), Image(grid=(1, 2 * m, 4 * m), origin=origin)])
        images = [s for s in whole.spans if s.kind == "image"]
        if len(images) != 1 or images[0].grid is None:  # rows as separate blocks, or a canvas of slices
            return RowResult(
                "crop",
                NOT_APPLICABLE,
                f"the {subject.rules.name!r} rules lay one image out as {len(images)} block(s) without one merged grid",
            )
        read = assert_crop_invariant(whole, part, subject.spec)
        if read is not None and tuple(read) != origin:  # "keep": the crop must sit where it was cut
            raise AssertionError(
                f"the crop was cut at {origin} but its coordinates place it at {tuple(read)}"
            )
        return f"a 2x4 crop at {origin} of a 6x8 merged grid scores like that region (crop rule {subject.rules.crop!r})"

    return _run("crop", subject, check)


def tiles(subject: Subject, quick: bool) -> RowResult:
    """Tiles of one image, in raster and in shuffled order, score like the untiled image."""
    if subject.rules is not None and subject.rules.tiles != "global":
        return RowResult(
            "tiles", NOT_APPLICABLE, f"tiles={subject.rules.tiles!r}: each tile has its own grid, by design"
        )

    def check() -> str:
        m = subject.rules.merge_size
        untiled = subject.positions([Text(subject.text(2, 21)), Image(grid=(1, 4 * m, 6 * m))])
        for order in TILE_ORDERS:
            tiled = [Text(subject.text(2, 21)), Image(grid=(1, 4 * m, 6 * m), tiles=(3, 2), tile_order=order)]
            assert_tile_invariant(subject.positions(tiled), untiled, subject.spec)
        return "3 x 2 tiles in raster and shuffled order score like the untiled image"

    return _run("tiles", subject, check)


def frames(subject: Subject, quick: bool) -> RowResult:
    """The same moments sampled at 1 and 2 fps get the same time coordinate (and q.k scores)."""
    rules = subject.rules
    if rules is not None and rules.video_support != "sized":
        return RowResult("frames", NOT_APPLICABLE, f"the {rules.name!r} rules read no sized videos")
    if rules is not None and rules.temporal != "seconds":
        return RowResult(
            "frames",
            NOT_APPLICABLE,
            f"temporal={rules.temporal!r}: the time coordinate counts temporal patches (or is a timestamp's "
            "text), not seconds, so resampling changes it by design",
        )

    def check() -> str:
        m = rules.merge_size
        low = subject.positions([Video(grid=(4, 2 * m, 2 * m), fps=1.0, wrap=False)])
        high = subject.positions([Video(grid=(8, 2 * m, 2 * m), fps=2.0, wrap=False)])
        assert_time_aligned(low, high, subject.spec)
        # every other patch of the 2 fps video is the 1 fps video: each keeps its frame's coordinates
        assert_frame_order_invariant(high, low, range(0, 8, 2), subject.spec)
        return "4 patches at 1 fps and 8 at 2 fps: the same seconds get the same t and the same coordinates"

    return _run("frames", subject, check)


__all__ = ["TILE_ORDERS", "crop", "frames", "tiles"]
