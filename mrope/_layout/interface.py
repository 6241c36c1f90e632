"""The interface every layout engine provides: its plan of a sequence and the engine's functions.

An engine module builds one :class:`LayoutEngine` (``ENGINE``) from its functions; :data:`mrope._layout.ENGINES`
maps each engine's name to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from mrope._layout.token_inputs import TokenInputs
from mrope._layout.token_scan import ScanResult
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Segment


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

    def lazy_positions(self) -> Positions:
        """``positions()`` whose ids may be written on first read (an engine that cannot defer them
        fills them at once)."""
        ...


@dataclass(frozen=True)
class LayoutEngine:
    """One layout engine's functions.

    - ``plan_segments(segments, rules, tokenizer)``: segments -> a plan whose ``positions()`` fills them.
    - ``count_tokens(segments, rules, tokenizer)``: the plan's token count, without positions.
    - ``scan_token_ids(inputs)``: the token-id interface's scan of a batch.
    - ``video_time(n_patches, second_per_grid, rules)``: the t offsets ``[n_patches]`` of a video's
      temporal patches.
    - ``next_start(positions)``: where a piece appended to a whole sequence starts.
    - ``continue_segments(segments, rules, tokenizer, start, image_index)``: segments laid out from
      ``start`` (with ``image_index`` images before them), so a turn costs its own tokens whatever the
      conversation's length.
    """

    plan_segments: Callable[[Sequence[Segment], LayoutRules, Any], LayoutPlan]
    count_tokens: Callable[[Sequence[Segment], LayoutRules, Any], int]
    scan_token_ids: Callable[[TokenInputs], ScanResult]
    video_time: Callable[[int, float, LayoutRules], np.ndarray]
    next_start: Callable[[Positions], int | float]
    continue_segments: Callable[[Sequence[Segment], LayoutRules, Any, Any, int], Positions]


__all__ = ["LayoutEngine", "LayoutPlan"]
