"""The sequence engine (HunyuanOCR's sequence positions): planning, token count and token-id scan row.

Every axis counts tokens; an image's own tokens carry (column, row, image index) on the last three.
transformers 5.24 models/hunyuan_vl/modeling_hunyuan_vl.py:887 (``get_rope_index``). Under
``positions_base="index"`` the image's tokens keep the sequence index too (MiniCPM-V 4.6), and so do a
video's (EXAONE 4.5: one run of placeholders per video; MiniMax-M3-VL: its frames planned as the counter
planner plans them, one wrapped block per temporal patch under the timestamps rule). Segments are planned
by the counter planner without tiles (nor videos, under ``"sequence"``) and without its plan cache (its
blocks are filled here, never fused with their wrappers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._errors import LayoutError
from mrope._grid import MAX_POSITION
from mrope._layout.counter import CounterPlan, video_time
from mrope._layout.counter import continue_segments as continue_counter_segments
from mrope._layout.counter import count_tokens as count_counter_tokens
from mrope._layout.interface import LayoutEngine
from mrope._layout.pieces import Block, TextRun
from mrope._layout.token_inputs import TokenInputs
from mrope._layout.token_scan import ScanResult, ScanRow, run_pieces, scan_batch
from mrope._positions import Positions, Span
from mrope._rules import LayoutRules
from mrope._segments import Segment


class SequencePositionsPlan(CounterPlan):
    """Pieces of one sequence under the sequence positions rule: untiled, never cached; videos only under
    ``positions_base="index"`` (``"sequence"`` writes an image index over each grid, which no video has)."""

    caches_plans = False
    pieces_are_positions = False
    takes_tiles = False

    @property
    def takes_videos(self) -> bool:  # type: ignore[override]
        """Videos only under ``positions_base="index"``, where their tokens keep the sequence index."""
        return not _writes_grid(self.rules)

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,
        start: int = 0,
    ) -> Positions:
        """Fill and describe the sequence; ``image_index`` is the index of its first image, ``start`` the
        token index of its first token (0, or the tokens before it in a continued conversation)."""
        ids, tokens, total = self.output_arrays(ids, tokens, total)
        spans: list[Span] = []
        top, _ = fill_sequence_pieces(
            self.pieces,
            ids,
            tokens,
            spans,
            image_index,
            self.owners,
            start,
            write_grid=_writes_grid(self.rules),
        )
        return self.describe(ids, tokens, spans, top, total)


def fill_sequence_pieces(
    pieces: Sequence[TextRun | Block],
    ids: np.ndarray,
    tokens: np.ndarray | None,
    spans: list[Span] | None,
    image_index: int = 0,
    owners: Sequence[int] | None = None,
    start: int = 0,
    write_grid: bool = True,
) -> tuple[int, int]:
    """Fill ``ids[:, :sum(n)]`` under the ``sequence`` positions rule (HunyuanOCR).

    Every axis holds the token's index in the sequence (counted from ``start``: 0, or the tokens before
    the pieces in a continued conversation); with ``write_grid`` the tokens of a vision block write ``(col,
    row, image index)`` on the last three axes (``ids`` has 3 or 4 rows; with 4, row 0 stays the sequence
    index), without it (``positions_base="index"``) they keep the sequence index.
    Returns ``(largest position, next image index)``.
    """
    total = sum(p.n for p in pieces)
    if start + total > MAX_POSITION:
        raise LayoutError(f"positions overflow: {total:,} tokens from token {start:,}")
    ids[:, :total] = np.arange(start, start + total, dtype=np.int64)
    top = start + total - 1
    a = 0
    first = ids.shape[0] - 3
    if owners is None:
        owners = [p.index for p in pieces]
    for p, owner in zip(pieces, owners, strict=True):
        b = a + p.n
        if tokens is not None:
            tokens[a:b] = p.token_ids if isinstance(p, TextRun) else p.token_id
        if isinstance(p, Block):
            frames, th, tw = len(p.tau), p.tile_h, p.tile_w
            if write_grid:
                grid = np.empty((3, frames, th, tw), dtype=np.int64)
                grid[0] = np.arange(tw, dtype=np.int64)
                grid[1] = np.arange(th, dtype=np.int64)[:, None]
                grid[2] = image_index
                ids[first:, a:b] = grid.reshape(3, -1)
                top = max(top, image_index)
            image_index += 1
            if spans is not None:
                spans.append(Span(p.kind, a, b, owner, (frames, th, tw)))
        elif spans is not None:
            spans.append(Span(p.kind, a, b, owner))
        a = b
    return top, image_index


def _writes_grid(rules: LayoutRules) -> bool:
    """Whether an image's tokens write its grid (``"sequence"``) or keep the sequence index (``"index"``)."""
    return rules.positions_base == "sequence"


def plan_segments(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> SequencePositionsPlan:
    """The plan of one sequence of segments (validated to be a list by the builder)."""
    plan = SequencePositionsPlan(rules)
    plan.extend(segments, tokenizer)
    return plan


def count_tokens(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> int:
    """Tokens of ``segments``, counted as the counter engine counts them (videos by arithmetic)."""
    return count_counter_tokens(segments, rules, tokenizer, SequencePositionsPlan)


def next_start(positions: Positions) -> int:
    """Where a piece appended to a sequence (or to the tail of one) starts: one past its last token's
    index (the first axis counts tokens on every token)."""
    return int(positions.ids[0, -1]) + 1 if positions.num_tokens else 0


def continue_segments(
    segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any, start: int, image_index: int = 0
) -> Positions:
    """Positions of ``segments`` appended after ``start`` tokens and ``image_index`` images (the image
    index runs on through the conversation), filled from there: see
    :func:`mrope._layout.counter.continue_segments`."""
    return continue_counter_segments(segments, rules, tokenizer, start, image_index, plan_segments)


def fill_row(scan: ScanRow) -> tuple[int, int]:
    """One row of the token-id scan; the image index carries on to the next row under
    ``image_index_scope="batch"``."""
    pieces = run_pieces(scan.runs, scan.row, scan.images, scan.videos, scan.rules)
    top, image_index = fill_sequence_pieces(
        pieces, scan.dense, None, None, scan.image_index, write_grid=_writes_grid(scan.rules)
    )
    if scan.rules.image_index_scope == "sequence":
        image_index = 0
    return top, image_index


def scan_token_ids(inputs: TokenInputs) -> ScanResult:
    """Positions, deltas and generation positions of a batch of token ids (videos too, but for the
    grid-writing ``"sequence"`` rule)."""
    return scan_batch(inputs, fill_row, images_only=_writes_grid(inputs.rules))


ENGINE = LayoutEngine(plan_segments, count_tokens, scan_token_ids, video_time, next_start, continue_segments)
"""The sequence engine (sequence positions: HunyuanOCR)."""


__all__ = ["ENGINE", "SequencePositionsPlan"]
