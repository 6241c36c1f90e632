"""The image-step engine (Falcon-OCR): a whole image one step on t, float (h, w) on its tokens.

Released code: TII's ``falcon-perception`` 1.0.0 (PyPI; tiiuae/Falcon-Perception), ``falcon_perception/data.py``:

- ``get_pos_thw_single`` :374-404 (and ``get_pos_thw`` :407-458 for a padded batch): t is
  ``cumsum(advance) - 1`` where every token advances except the image tokens, the registers and the end of
  image (``_get_image_token_masks`` :360-371), so an image block ``<|image_cls|> reg1..reg4 img x n
  <|end_of_image|>`` (``tokenize_inputs`` :514-521) sits on one t, its start's, and the next token one past it;
  pads get 0 (:455);
- ``_compute_image_spatial_positions`` :330-357: the image's ``H x W`` patches get
  ``h = linspace(-sqrt(H/W), sqrt(H/W), H)`` by row and ``w = linspace(-sqrt(W/H), sqrt(W/H), W)`` by
  column (float64, stored float32 at :390-398); every other token has ``(h, w) = (0, 0)``.

mlx-vlm 0.7.10 (``mlx_vlm/models/falcon_ocr/language.py`` ``get_rope_index`` :431-451,
``compute_pos_hw`` :90-118) computes the same. Positions are float32 rows ``(t, h, w)`` (the model's
``pos_t`` and ``pos_hw``); the rotation they drive is :func:`mrope.ops.golden_gate_table`'s.
Segments: text and images of one frame (the sequence planner, untiled, never cached, no videos); an image's
wrapper is ``vision_start_id``, ``vision_registers`` register ids after it, and ``vision_end_id``.
"""

from __future__ import annotations

import math
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


class ImageStepPlan(CounterPlan):
    """Pieces of one sequence under the image-step rule: images only, untiled, never cached."""

    caches_plans = False
    pieces_are_positions = False
    takes_tiles = False
    takes_videos = False

    def wrapped(self, index: int, wrap: bool, body: Any) -> None:
        """An image's wrapper: its start, ``vision_registers`` register tokens, the body, its end."""
        rules = self.rules
        if wrap:
            self.text(1, rules.vision_start_id, "wrapper", index)
            first = rules.vision_start_id + 1
            self.text(
                rules.vision_registers, list(range(first, first + rules.vision_registers)), "wrapper", index
            )
        body()
        if wrap:
            self.text(1, rules.vision_end_id, "wrapper", index)

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,
        start: float = 0,
    ) -> Positions:
        """Fill and describe the sequence; ``start`` is t of its first token (0, or where a continued
        conversation stands); ``image_index`` is unused."""
        ids, tokens, total = self.output_arrays(ids, tokens, total)
        spans: list[Span] = []
        advance = np.zeros(total, dtype=np.float64)
        a = 0
        open_image = None  # the image segment whose block is being written: its pieces share one t
        for p, owner in zip(self.pieces, self.owners, strict=True):
            b = a + p.n
            if isinstance(p, TextRun):
                tokens[a:b] = p.token_ids
                spans.append(Span(p.kind, a, b, owner))
            else:
                tokens[a:b] = p.token_id
                spans.append(Span(p.kind, a, b, owner, (len(p.tau), p.tile_h, p.tile_w)))
            if isinstance(p, TextRun) and p.kind == "text":
                advance[a:b], open_image = 1, None
            elif owner != open_image:
                advance[a], open_image = 1, owner
            a = b
        top = _write(ids, advance, self.pieces, start)
        return self.describe(ids, tokens, spans, top, total)


def spread(hh: int, ww: int) -> np.ndarray:
    """float64 ``[2, hh * ww]``: ``(h, w)`` of an ``hh x ww`` grid's tokens in raster order, evenly over
    ``[-sqrt(hh/ww), sqrt(hh/ww)]`` and ``[-sqrt(ww/hh), sqrt(ww/hh)]`` (data.py:352-357)."""
    h = np.linspace(-math.sqrt(hh / ww), math.sqrt(hh / ww), hh)
    w = np.linspace(-math.sqrt(ww / hh), math.sqrt(ww / hh), ww)
    return np.stack([np.repeat(h, ww), np.tile(w, hh)])


def _write(ids: np.ndarray, advance: np.ndarray, pieces: Sequence[TextRun | Block], start: float) -> float:
    """Write t (``start - 1 + cumsum(advance)``) and the blocks' ``(h, w)`` (0 elsewhere) into ``ids[:, :n]``
    (float32 ``[3, T]``); return the largest t (the start before the first token when there is none)."""
    n = advance.size
    t = start - 1 + np.cumsum(advance)
    if n and t[-1] > MAX_POSITION:
        raise LayoutError(f"positions overflow: t reaches {t[-1]:,.0f}")
    ids[0, :n] = t
    ids[1:, :n] = 0
    a = 0
    for p in pieces:
        if isinstance(p, Block):
            if len(p.tau) != 1:
                raise LayoutError(
                    f"the image-step rule (Falcon-OCR) lays out one frame per image; got a grid of {len(p.tau)}"
                )
            ids[1:, a : a + p.n] = spread(p.tile_h, p.tile_w)
        a += p.n
    return float(t[-1]) if n else start - 1


def plan_segments(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> ImageStepPlan:
    """The plan of one sequence of segments (validated to be a list by the builder)."""
    plan = ImageStepPlan(rules)
    plan.extend(segments, tokenizer)
    return plan


def count_tokens(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> int:
    """Tokens of ``segments``, as :class:`ImageStepPlan` plans them."""
    return count_counter_tokens(segments, rules, tokenizer, ImageStepPlan)


def next_start(positions: Positions) -> float:
    """t of a piece appended to a sequence: one past its last token's (text, or an image's end)."""
    return float(positions.ids[0, -1]) + 1 if positions.num_tokens else 0.0


def continue_segments(
    segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any, start: float, image_index: int = 0
) -> Positions:
    """Positions of ``segments`` appended where t stands at ``start``: see
    :func:`mrope._layout.counter.continue_segments`."""
    return continue_counter_segments(segments, rules, tokenizer, start, image_index, plan_segments)


def fill_row(scan: ScanRow) -> tuple[float, int]:
    """One row of the token-id scan, t from its ids as data.py:400-402 counts it (every token advances but
    the image tokens, the registers and the end of image), ``(h, w)`` from its image runs' grids."""
    rules, ids = scan.rules, scan.ids
    first = rules.vision_start_id + 1
    still = [rules.image_pad_id, rules.vision_end_id, *range(first, first + rules.vision_registers)]
    advance = (~np.isin(ids, still)).astype(np.float64)
    pieces = run_pieces(scan.runs, scan.row, scan.images, scan.videos, rules)
    return _write(scan.dense, advance, pieces, 0.0), scan.image_index


def scan_token_ids(inputs: TokenInputs) -> ScanResult:
    """Positions, deltas and generation positions of a batch of token ids (images only)."""
    return scan_batch(inputs, fill_row, per_row_types=True, images_only=True)


ENGINE = LayoutEngine(plan_segments, count_tokens, scan_token_ids, video_time, next_start, continue_segments)
"""The image-step engine (Falcon-OCR)."""


__all__ = ["ENGINE", "ImageStepPlan", "spread"]
