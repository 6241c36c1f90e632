"""The layout engines, chosen from one table by the rules: counter (the default), sequence, canvas, omni,
image_step.

Each engine module builds one :class:`LayoutEngine` (``plan_segments``, ``count_tokens``,
``scan_token_ids``, ``video_time``, ``next_start``, ``continue_segments``: see
:mod:`mrope._layout.interface`). :func:`engine_for` names the engine of a set of rules and :data:`ENGINES`
maps that name to its engine, the way transformers' ``ROPE_INIT_FUNCTIONS`` maps a rope type to its
function; :func:`engine` is the one way to choose it.
"""

from __future__ import annotations

from mrope._layout import canvas, counter, image_step, omni, sequence
from mrope._layout.interface import LayoutEngine, LayoutPlan
from mrope._rules import LayoutRules

ENGINES: dict[str, LayoutEngine] = {
    "counter": counter.ENGINE,
    "sequence": sequence.ENGINE,
    "canvas": canvas.ENGINE,
    "omni": omni.ENGINE,
    "image_step": image_step.ENGINE,
}
"""Engine name -> engine."""

_ENGINE_OF_BASE: dict[str, str] = {"index": "sequence"}
"""``positions_base`` values laid out by an engine of another name (``"index"``: the sequence engine, which
reads the rules to leave out the grid write); every other value names its engine. Rules with audio go to
the omni engine whatever their base; its timeline writes the ``"index"`` rule itself (Qwen3-ASR)."""


def engine_for(rules: LayoutRules) -> str:
    """The name of the engine that lays out ``rules``: ``"omni"`` when they have audio, else the engine of
    their ``positions_base`` (``"counter"``, ``"sequence"`` (also for ``"index"``), ``"canvas"`` or ``"image_step"``)."""
    if rules.has_audio:
        return "omni"
    return _ENGINE_OF_BASE.get(rules.positions_base, rules.positions_base)


def engine(rules: LayoutRules) -> LayoutEngine:
    """The engine that lays out ``rules`` (``ENGINES[engine_for(rules)]``)."""
    return ENGINES[engine_for(rules)]


__all__ = ["ENGINES", "LayoutEngine", "LayoutPlan", "engine", "engine_for"]
