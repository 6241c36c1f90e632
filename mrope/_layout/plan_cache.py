"""The cache of image and video segment plans, per rules: what one segment adds to a counter plan.

An image or video depends only on its own fields and the rules, not on its place in a sequence, so
its plan (pieces and the grids it reports) is kept per rules and reused by every later occurrence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from mrope._caches import register
from mrope._layout.pieces import Block, TextRun
from mrope._rules import LayoutRules
from mrope._segments import Segment


class SegmentPlan(NamedTuple):
    """What one image or video segment adds to a plan, wherever it stands (pieces are shared: never
    mutate them)."""

    pieces: tuple[TextRun | Block, ...]
    image_grids: tuple[tuple[int, int, int], ...]
    video_grids: tuple[tuple[int, int, int], ...]
    second_per_grid: tuple[float, ...]


_SEGMENT_PLANS: dict[LayoutRules, dict[Segment, SegmentPlan]] = {}
SEGMENT_PLAN_LIMIT = 4096
"""Most segment plans cached (all rules together); when full the cache starts over. Each holds at most
:data:`_PLAN_PIECES` pieces and :data:`_PLAN_FRAMES` temporal offsets, tiles, frame times and tile
orders together (a few KiB)."""
_PLAN_PIECES = 64
_PLAN_FRAMES = 1024
_segment_plan_count = 0
_last_plans: list = [None, None]  # the rules and plans of the latest lookup


def _clear_segment_plans() -> None:
    global _segment_plan_count
    _SEGMENT_PLANS.clear()
    _last_plans[:] = [None, None]
    _segment_plan_count = 0


register(
    "layout.segment_plans",
    _clear_segment_plans,
    lambda: sum(len(plans) for plans in _SEGMENT_PLANS.values()),
    SEGMENT_PLAN_LIMIT,
)


def segment_plans(rules: LayoutRules) -> dict[Segment, SegmentPlan]:
    """The cached plans of ``rules``' segments (segment -> its plan), made empty on first use."""
    last_rules, last_plans = _last_plans
    if last_rules is rules:  # the same rules object as last time: skip hashing it
        return last_plans
    plans = _SEGMENT_PLANS.get(rules)
    if plans is None:
        plans = _SEGMENT_PLANS[rules] = {}
    _last_plans[:] = [rules, plans]
    return plans


def small_plan(seg: Segment, pieces: Sequence[TextRun | Block]) -> bool:
    """Whether a plan (and the segment, its key) is small enough to keep: the cache outlives requests."""
    if len(pieces) > _PLAN_PIECES:
        return False
    held = len(getattr(seg, "frame_times", None) or ()) + len(getattr(seg, "tile_order", None) or ())
    return held + sum(len(p.tau) + len(p.tile_h0) for p in pieces if type(p) is Block) <= _PLAN_FRAMES


def remember_plan(plans: dict[Segment, SegmentPlan], seg: Segment, plan: SegmentPlan) -> None:
    """Keep ``plan`` for ``seg`` in ``plans`` (one rules' dict), starting the whole cache over when it
    holds :data:`SEGMENT_PLAN_LIMIT` plans."""
    global _segment_plan_count
    if _segment_plan_count >= SEGMENT_PLAN_LIMIT:
        _SEGMENT_PLANS.clear()
        _last_plans[:] = [None, None]
        _segment_plan_count = 0
        plans.clear()  # the caller's dict may already be out of _SEGMENT_PLANS; keep it bounded too
    try:
        plans[seg] = plan
    except TypeError:  # a segment holding something unhashable is simply planned every time
        return
    _segment_plan_count += 1


__all__ = ["SEGMENT_PLAN_LIMIT", "SegmentPlan", "remember_plan", "segment_plans", "small_plan"]
