"""The canvas engine (MiniCPM-V 4.7): planning, token count and token-id scan row of the canvas rule.

A thumbnail is stretched over the canvas its detail slices tile. A picture or a video frame is a thumbnail
crop wrapped in ``<image>`` .. ``</image>`` (the rules' ``vision_start_id`` / ``vision_end_id``), optionally
followed by detail slices, each wrapped in ``<slice>`` .. ``</slice>``, in rows separated by a newline token
(``newline_id``). A run of frames that only these markers separate is one group (how a clip emits its
frames).

Each frame is laid out on a canvas at origin ``o`` (the counter when the frame starts):

- the canvas is ``Hc x Wc`` merged tokens: ``rows * slice_h`` by ``cols * slice_w`` (sizes of the first
  slice), or the thumbnail's own grid when there are no slices;
- every token of the frame starts at ``o`` on all three axes; ``t`` stays ``o``;
- thumbnail token ``(i, j)`` of an ``h x w`` grid gets ``h = o + round(linspace(0, Hc - 1, h))[i]`` and
  ``w = o + round(linspace(0, Wc - 1, w))[j]`` (stretched over the whole canvas);
- slice ``k`` sits at ``(row * slice_h, col * slice_w)``; its tokens count on from there;
- markers are pinned: ``<image>`` to the halo ``o - 1`` (0 at the start), ``</image>`` to ``(o + Hc,
  o + Wc)``, ``<slice>`` to its slice's first corner, ``</slice>`` to its last, a row's newline just past the
  canvas's right edge at the row's last line;
- the counter resumes at ``o + max(Hc, Wc) + 1``.

Text is 1-D. The crops are found from token types (0 text, 1 image, 2 video): each maximal non-text
run is one crop; a crop right after ``<slice>`` is a slice of the open frame, any other opens a frame.
Grids come per modality, in order: a frame's thumbnail, then its slices (transformers 5.24
models/minicpmv4_7/modeling_minicpmv4_7.py:952, ``get_rope_index``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mrope._errors import LayoutError, TokenError
from mrope._grid import merged_grid
from mrope._layout.counter import CounterPlan, planned_tokens, video_time
from mrope._layout.counter import continue_segments as continue_counter_segments
from mrope._layout.interface import LayoutEngine
from mrope._layout.pieces import fill_pieces
from mrope._layout.token_inputs import TokenInputs
from mrope._layout.token_scan import ScanResult, ScanRow, scan_batch
from mrope._positions import Positions, Span
from mrope._rules import LayoutRules
from mrope._segments import Image, Segment, Video


def stretch(extent: int, steps: int) -> np.ndarray:
    """``round(linspace(0, extent - 1, steps))`` as int64, computed like torch's float32 ``linspace``
    (float32 step, each value one fused multiply-add from the nearer end, rounded half to even): the
    thumbnail's rows or columns spread over a canvas side of ``extent`` tokens."""
    if steps == 1:
        return np.zeros(1, dtype=np.int64)
    end = float(extent - 1)
    step = float(np.float32(np.float32(end) / np.float32(steps - 1)))
    i = np.arange(steps, dtype=np.float64)
    values = np.where(i < steps // 2, step * i, end - step * (steps - 1 - i)).astype(np.float32)
    return np.round(values).astype(np.int64)


def _frames(ids: list[int], types: list[int], markers: set[int], slice_start: int) -> list[tuple[int, list]]:
    """Groups of frames: ``[(group_start, [[modality, thumb_a, thumb_z, slices], ...]), ...]``."""
    n = len(types)
    groups: list[tuple[int, list]] = []
    open_slices: list[tuple[int, int]] | None = None
    prev_end = 0
    a = 0
    while a < n:
        kind = types[a]
        z = a + 1
        while z < n and types[z] == kind:
            z += 1
        if kind:
            if open_slices is not None and a > 0 and ids[a - 1] == slice_start:
                open_slices.append((a, z))
            else:
                open_slices = []
                frame = [kind, a, z, open_slices]
                if groups and all(tok in markers for tok in ids[prev_end : a - 1]):
                    groups[-1][1].append(frame)
                else:
                    groups.append((a - 1, [frame]))
            prev_end = z
        a = z
    return groups


def check_marker_ids(rules: LayoutRules) -> None:
    """Refuse canvas rules whose marker ids are unset (they come from a checkpoint's config).

    Raises:
        TokenError: ``slice_start_id``, ``slice_end_id`` or ``newline_id`` is ``None``.
    """
    ids_needed = (rules.slice_start_id, rules.slice_end_id, rules.newline_id)
    if any(v is None for v in ids_needed):
        raise TokenError(
            f"the canvas rule needs its marker ids (slice_start_id, slice_end_id, newline_id); the "
            f"{rules.name!r} rules have {ids_needed}: they come from the checkpoint's config "
            "(mrope.from_pretrained) or rules={...}"
        )


def canvas_row(
    ids: list[int],
    types: list[int],
    take: Callable[[int, int, int], tuple[int, int]],
    rules: LayoutRules,
    start: int = 0,
) -> np.ndarray:
    """Positions ``[3, n]`` of one unpadded sequence under the canvas rule.

    Args:
        ids: token ids; types: 0 text, 1 image, 2 video per token.
        take: ``take(modality, crop_start, crop_tokens) -> (h, w)``: the next grid of that modality in
            patches; it checks the crop's token count.
        rules: marker ids (``vision_start_id``, ``vision_end_id``, ``slice_start_id``, ``slice_end_id``,
            ``newline_id``) and ``merge_size``.
        start: the canvas counter before the first token (0, or where a continued conversation stands).
    """
    check_marker_ids(rules)
    n = len(ids)
    merge = rules.merge_size
    slice_start = int(rules.slice_start_id)  # type: ignore[arg-type]
    markers = {slice_start, rules.slice_end_id, rules.vision_start_id, rules.vision_end_id, rules.newline_id}
    pos = np.broadcast_to(np.arange(n, dtype=np.int64), (3, n)).copy()
    counter = start
    cursor = 0
    for group_start, frames in _frames(ids, types, markers, slice_start):
        for frame in frames:  # the end of a frame: past the markers that close it
            z = frame[3][-1][1] if frame[3] else frame[2]
            while z < n and ids[z] in markers:
                z += 1
            frame.append(z)
        group_end = frames[-1][4]
        if group_start > cursor:
            pos[:, cursor:group_start] = np.arange(counter, counter + group_start - cursor)
            counter += group_start - cursor
        frame_cursor = group_start
        for kind, thumb_a, thumb_z, slices, frame_z in frames:
            th, tw = take(kind, thumb_a, thumb_z - thumb_a)
            frame_a = thumb_a - 1
            if frame_a > frame_cursor:  # tokens between frames are text, and one step follows them
                pos[:, frame_cursor:frame_a] = np.arange(counter, counter + frame_a - frame_cursor)
                counter += frame_a - frame_cursor + 1
            frame_z = min(frame_z, group_end)
            o = counter
            th, tw = th // merge, tw // merge
            canvas_h, canvas_w = th, tw
            cols = rows = slice_h = slice_w = 0
            grids: list[tuple[int, int]] = []
            if slices:
                cols = len(slices)  # a gap wider than "</slice><slice>" ends a row
                for k in range(len(slices) - 1):
                    if slices[k + 1][0] - slices[k][1] > 2:
                        cols = k + 1
                        break
                rows = len(slices) // cols
                if rows * cols != len(slices):
                    rows, cols = 1, len(slices)
                grids = [take(kind, s_a, s_z - s_a) for s_a, s_z in slices]
                slice_h, slice_w = grids[0][0] // merge, grids[0][1] // merge
                canvas_h, canvas_w = rows * slice_h, cols * slice_w
            pos[:, frame_a:frame_z] = o
            pos[1:, frame_a] = max(o - 1, 0)
            if thumb_z < frame_z:
                pos[1, thumb_z] = o + canvas_h
                pos[2, thumb_z] = o + canvas_w
            hh = o + stretch(canvas_h, th)
            ww = o + stretch(canvas_w, tw)
            pos[1, thumb_a:thumb_z] = np.repeat(hh, tw)
            pos[2, thumb_a:thumb_z] = np.tile(ww, th)
            for k, ((s_a, s_z), (sh, sw)) in enumerate(zip(slices, grids, strict=True)):
                h0 = o + (k // cols) * slice_h
                w0 = o + (k % cols) * slice_w
                sh, sw = sh // merge, sw // merge
                if s_a - 1 >= frame_a:
                    pos[1, s_a - 1], pos[2, s_a - 1] = h0, w0
                if s_z < frame_z:
                    pos[1, s_z], pos[2, s_z] = h0 + sh - 1, w0 + sw - 1
                pos[1, s_a:s_z] = np.repeat(h0 + np.arange(sh, dtype=np.int64), sw)
                pos[2, s_a:s_z] = np.tile(w0 + np.arange(sw, dtype=np.int64), sh)
            for k in range(len(slices) - 1):
                gap_a, gap_z = slices[k][1], slices[k + 1][0]
                if gap_z - gap_a > 2:  # the newline(s) between "</slice>" and "<slice>" end row k // cols
                    pos[1, gap_a + 1 : gap_z - 1] = o + (k // cols + 1) * slice_h - 1
                    pos[2, gap_a + 1 : gap_z - 1] = o + cols * slice_w
            counter = o + max(canvas_h, canvas_w) + 1
            frame_cursor = frame_z
        if frame_cursor < group_end:
            pos[:, frame_cursor:group_end] = np.arange(counter, counter + group_end - frame_cursor)
            counter += group_end - frame_cursor
        cursor = group_end
    if cursor < n:
        pos[:, cursor:] = np.arange(counter, counter + n - cursor)
    return pos


# ------------------------------------------------------------------------------------ segments


class CanvasPlan(CounterPlan):
    """Pieces of one sequence under the canvas rule: text runs only (markers and crops), whose positions
    :func:`canvas_row` writes over the filled token ids; never cached."""

    caches_plans = False
    pieces_are_positions = False

    def plan_image(self, seg: Image, index: int) -> None:
        self._canvas(seg, index)

    def plan_video(self, seg: Video, index: int, tokenizer: Any) -> None:
        self._canvas(seg, index)

    def _canvas(self, seg: Image | Video, index: int) -> None:
        """A picture or the frames of a video under the canvas rule: each frame is
        ``<image>`` thumbnail ``</image>``, then for a tiled image its rows of ``<slice>`` tile ``</slice>``
        joined by the newline token. Grids are reported per crop ``(1, h, w)``, in order, as the token
        interface takes them; positions are written by :func:`canvas_row` over the tokens."""
        rules = self.rules
        check_marker_ids(rules)
        if isinstance(seg, Video) and (seg.audio is not None or not seg.wrap):
            raise LayoutError(
                f"video (segment {index}): the canvas rule takes wrapped video frames without audio"
            )
        if isinstance(seg, Image) and (
            not seg.wrap or seg.generate or (seg.tiles and seg.thumbnail_grid is None)
        ):
            raise LayoutError(
                f"image (segment {index}): the canvas rule takes a wrapped image, alone or with tiles=(cols, rows) "
                "and its thumbnail_grid"
            )
        kind, pad = ("image", rules.image_pad_id) if isinstance(seg, Image) else ("video", rules.video_pad_id)
        grids = self.image_grids if kind == "image" else self.video_grids
        m = rules.merge_size

        def crop(grid: tuple[int, int, int]) -> None:
            _, hh, ww = merged_grid(grid, m, f"{kind} (segment {index})")
            grids.append((1, grid[1], grid[2]))
            self.text(hh * ww, pad, kind, index)

        frames = [seg.grid] if isinstance(seg, Image) else [(1, seg.grid[1], seg.grid[2])] * seg.grid[0]
        for grid in frames:
            self.text(1, rules.vision_start_id, "wrapper", index)
            crop(seg.thumbnail_grid if seg.thumbnail_grid else grid)
            self.text(1, rules.vision_end_id, "wrapper", index)
            if seg.tiles is not None:
                cols, rows = seg.tiles
                _, hh, ww = merged_grid(grid, m, f"{kind} (segment {index})")
                if hh % rows or ww % cols:
                    raise LayoutError(
                        f"{kind} (segment {index}): merged grid {hh}x{ww} (h x w) does not split into {rows} "
                        f"rows and {cols} columns of equal tiles"
                    )
                tile = (1, grid[1] // rows, grid[2] // cols)
                for r in range(rows):
                    if r:
                        self.text(1, rules.newline_id, "wrapper", index)  # type: ignore[arg-type]
                    for _ in range(cols):
                        self.text(1, rules.slice_start_id, "wrapper", index)  # type: ignore[arg-type]
                        crop(tile)
                        self.text(1, rules.slice_end_id, "wrapper", index)  # type: ignore[arg-type]

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,
        start: int = 0,
    ) -> Positions:
        """Fill the token ids and spans, then write the canvas positions over them, the counter at
        ``start`` before the first token (0, or where a continued conversation stands). The fill also
        bounds the positions: a frame advances the canvas counter by fewer than its tokens."""
        ids, tokens, total = self.output_arrays(ids, tokens, total)
        lay = self.rules
        spans: list[Span] = []
        fill_pieces(self.pieces, ids, tokens, spans, lay.advance, self.owners, start)  # token ids, spans
        ids[:] = canvas_positions(tokens, lay, self.image_grids, self.video_grids, start)
        top = int(ids.max()) if total else start - 1
        return self.describe(ids, tokens, spans, top, total)


def canvas_positions(
    tokens: np.ndarray,
    rules: LayoutRules,
    image_grids: Sequence[Sequence[int]],
    video_grids: Sequence[Sequence[int]],
    start: int = 0,
) -> np.ndarray:
    """Positions ``[3, T]`` of one sequence's tokens under the canvas rule, the crops' grids taken in order
    (the counter at ``start`` before the first token)."""
    queues = {1: iter(image_grids), 2: iter(video_grids)}
    types = (tokens == rules.image_pad_id).astype(np.int64) + 2 * (tokens == rules.video_pad_id)

    def take(kind: int, at: int, count: int) -> tuple[int, int]:
        _, h, w = next(queues[kind])
        return h, w

    return canvas_row(tokens.tolist(), types.tolist(), take, rules, start)


def frame_tokens(thumbnail_tokens: int, slice_tokens: int, tiles: tuple[int, int] | None) -> int:
    """Tokens of one frame under the canvas rule: ``<image>`` thumbnail ``</image>``, then with
    ``tiles=(cols, rows)`` its rows of ``<slice>`` tile ``</slice>`` joined by one newline token
    (``slice_tokens``: the tokens of all its slices together)."""
    if tiles is None:
        return thumbnail_tokens + 2
    cols, rows = tiles
    return thumbnail_tokens + 2 + slice_tokens + 2 * cols * rows + rows - 1


def plan_segments(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> CanvasPlan:
    """The plan of one sequence of segments (validated to be a list by the builder)."""
    plan = CanvasPlan(rules)
    plan.extend(segments, tokenizer)
    return plan


def count_tokens(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> int:
    """Tokens of ``segments``: a wrapped video by arithmetic (a clip of any length costs the same),
    anything else by planning it."""
    lay = rules
    total = 0
    for i, seg in enumerate(segments):
        if isinstance(seg, Video) and seg.audio is None and seg.wrap:
            t, hh, ww = merged_grid(seg.grid, lay.merge_size, f"video (segment {i})")
            if seg.tiles is None:
                total += t * frame_tokens(hh * ww, 0, None)
            else:
                _, th, tw = merged_grid(seg.thumbnail_grid, lay.merge_size, f"video (segment {i})")
                total += t * frame_tokens(th * tw, hh * ww, seg.tiles)
            continue
        total += planned_tokens(CanvasPlan, seg, i, lay, tokenizer)
    return total


# ------------------------------------------------------------------------------------ token ids


def next_start(positions: Positions) -> int:
    """Where the counter stands after a whole sequence: ``1 + max`` (a frame resumes it at
    ``o + max(Hc, Wc) + 1``, one past its largest coordinate; text counts on from there)."""
    return int(positions.ids.max()) + 1 if positions.num_tokens else 0


def continue_segments(
    segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any, start: int, image_index: int = 0
) -> Positions:
    """Positions of ``segments`` appended where the counter stands at ``start``, laid out from there: see
    :func:`mrope._layout.counter.continue_segments`."""
    return continue_counter_segments(segments, rules, tokenizer, start, image_index, plan_segments)


def fill_row(scan: ScanRow) -> tuple[int, int]:
    """One row of the token-id scan, from its token ids and types."""
    row_ids, row_types = scan.ids, scan.types
    assert row_ids is not None and row_types is not None  # the canvas rule scans rows one by one
    queues = {1: scan.images, 2: scan.videos}
    scan.dense[:] = canvas_row(
        row_ids.tolist(),
        row_types.tolist(),
        lambda kind, at, count: queues[kind].take_one(count, scan.row, at),
        scan.rules,
    )
    return (int(scan.dense.max()) if len(row_ids) else -1), scan.image_index


def scan_token_ids(inputs: TokenInputs) -> ScanResult:
    """Positions, deltas and generation positions of a batch of token ids, scanned row by row."""
    return scan_batch(inputs, fill_row, per_row_types=True)


ENGINE = LayoutEngine(plan_segments, count_tokens, scan_token_ids, video_time, next_start, continue_segments)
"""The canvas engine (MiniCPM-V 4.7)."""


__all__ = ["ENGINE", "CanvasPlan", "frame_tokens", "stretch"]
