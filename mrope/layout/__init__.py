"""The layout engines, chosen from one table by the rules: counter (the default), sequence, canvas, omni.

Each engine is a module with one interface (:class:`LayoutEngine`): ``plan_segments`` (segments -> a plan
whose ``positions()`` fills them), ``count_tokens``, ``scan_token_ids`` (the token-id interface's
scan), ``video_time`` (the t offsets of a video's temporal patches), and for continued conversations
``next_start`` (where a piece appended to a sequence starts) and ``continue_segments`` (segments laid
out from there: the plan's ``positions(start=...)`` fills from that running state, so a turn costs its
own tokens whatever the conversation's length). :func:`engine_for` names the engine of a set of rules and :data:`ENGINES` maps that name to its
module, the way transformers' ``ROPE_INIT_FUNCTIONS`` maps a rope type to its function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from mrope.layout import canvas, counter, omni, sequence
from mrope.layout.token_inputs import TokenInputs
from mrope.positions import Positions
from mrope.rules import LayoutRules
from mrope.segments import Segment


class LayoutPlan(Protocol):
    """One planned sequence, as the builder fills it."""

    notes: list[str]
    image_grids: list[tuple[int, int, int]]
    targets: list[tuple[int, int, int]]

    @property
    def num_tokens(self) -> int: ...

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,
        start: Any = 0,
    ) -> Positions: ...


class LayoutEngine(Protocol):
    """What every engine module provides."""

    def plan_segments(
        self, segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any
    ) -> LayoutPlan: ...

    def count_tokens(self, segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> int: ...

    def scan_token_ids(
        self, inputs: TokenInputs
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None]]: ...

    def video_time(self, n_patches: int, second_per_grid: float, rules: LayoutRules) -> np.ndarray: ...

    def next_start(self, positions: Positions) -> int | float: ...

    def continue_segments(
        self,
        segments: Sequence[Segment],
        rules: LayoutRules,
        tokenizer: Any,
        start: Any,
        image_index: int = 0,
    ) -> Positions: ...


ENGINES: dict[str, LayoutEngine] = {
    "counter": counter,  # type: ignore[dict-item]
    "sequence": sequence,  # type: ignore[dict-item]
    "canvas": canvas,  # type: ignore[dict-item]
    "omni": omni,  # type: ignore[dict-item]
}
"""Engine name -> engine module."""


def engine_for(rules: LayoutRules) -> str:
    """The name of the engine that lays out ``rules``: ``"omni"`` when they have audio, else their
    ``positions_base`` (``"counter"``, ``"sequence"`` or ``"canvas"``)."""
    return "omni" if rules.has_audio else rules.positions_base


def engine(rules: LayoutRules) -> LayoutEngine:
    """The engine module that lays out ``rules`` (``ENGINES[engine_for(rules)]``)."""
    return ENGINES[engine_for(rules)]


__all__ = ["ENGINES", "LayoutEngine", "LayoutPlan", "engine", "engine_for"]
