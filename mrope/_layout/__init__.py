"""The layout engines, chosen from one table by the rules: counter (the default), sequence, canvas, omni.

Each engine module builds one :class:`LayoutEngine` (``plan_segments``, ``count_tokens``,
``scan_token_ids``, ``video_time``, ``next_start``, ``continue_segments``: see
:mod:`mrope._layout.interface`). :func:`engine_for` names the engine of a set of rules and :data:`ENGINES`
maps that name to its engine, the way transformers' ``ROPE_INIT_FUNCTIONS`` maps a rope type to its
function; :func:`engine` is the one way to choose it.
"""

from __future__ import annotations

from mrope._layout import canvas, counter, omni, sequence
from mrope._layout.interface import LayoutEngine, LayoutPlan
from mrope._rules import LayoutRules

ENGINES: dict[str, LayoutEngine] = {
    "counter": counter.ENGINE,
    "sequence": sequence.ENGINE,
    "canvas": canvas.ENGINE,
    "omni": omni.ENGINE,
}
"""Engine name -> engine."""


def engine_for(rules: LayoutRules) -> str:
    """The name of the engine that lays out ``rules``: ``"omni"`` when they have audio, else their
    ``positions_base`` (``"counter"``, ``"sequence"`` or ``"canvas"``)."""
    return "omni" if rules.has_audio else rules.positions_base


def engine(rules: LayoutRules) -> LayoutEngine:
    """The engine that lays out ``rules`` (``ENGINES[engine_for(rules)]``)."""
    return ENGINES[engine_for(rules)]


__all__ = ["ENGINES", "LayoutEngine", "LayoutPlan", "engine", "engine_for"]
