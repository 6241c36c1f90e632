"""The token-id scan the layout engines share: grid queues, runs, vision blocks and the batch loop.

The inputs arrive validated (:mod:`mrope._layout.token_inputs`); the batch loop asks an engine to fill
each row.

A sequence arrives as token ids with runs of placeholder tokens (``<|image_pad|>``, ``<|video_pad|>``)
and one flat list of grids per modality, shared by the whole batch and consumed in order. Vision runs
are found either by the placeholder ids (the transformers 4.x token scan) or from
``mm_token_type_ids`` (0 text, 1 image, 2 video; the transformers 5.x form). Every run must be
covered exactly by whole grids: a mismatch is a :class:`~mrope.TokenError` that names the run, the
grid and the counts, never an IndexError from deep inside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from mrope._caches import register
from mrope._errors import LayoutError, TokenError
from mrope._grid import MAX_POSITION, image_time, plan_delta, position_dtype, target_positions, temporal_index
from mrope._layout.leniency import tolerate
from mrope._layout.pieces import (
    OWN_ADVANCES,
    ZERO_OFFSETS,
    Block,
    TextRun,
    add_template,
    advance_own,
    block_template,
    fill_pieces,
    untiled_block,
    write_text,
)
from mrope._layout.token_inputs import (
    TYPES_ERROR,
    BatchRuns,
    PadRuns,
    TokenInputs,
    TokenRuns,
    as_numpy,
    check_type_values,
    grid_rows,
    seconds_per_grid,
)
from mrope._rules import LayoutRules

_UNUSED_GRIDS = (
    "grid rows (image_grid_thw / video_grid_thw) that no placeholder run uses, e.g. a row's image hidden by "
    "the attention mask, are ignored, as the model ignores them"
)
"""The lenient reading's note for grids left over after the scan (:func:`~mrope._layout.leniency.tolerate`)."""


class GridQueue:
    """One modality's grids, consumed in order across the batch."""

    def __init__(
        self,
        name: str,
        rows: list[list[int]],
        merge: int,
        spg: list[float] | None,
        temporal_merge: int = 1,
        newline: int = 0,
    ) -> None:
        self.name = name
        self.rows = rows
        self.spg = spg
        self.next = 0
        tokens = self.tokens = []  # placeholder tokens of each grid: merged frames of H' rows of W' (+1)
        for i, (t, h, w) in enumerate(rows):
            if h % merge or w % merge:
                raise TokenError(
                    f"{name}[{i}] = {[t, h, w]}: h and w must be multiples of the merge size {merge}"
                )
            if t % temporal_merge:
                raise TokenError(
                    f"{name}[{i}] = {[t, h, w]}: t must be a multiple of the temporal merge size {temporal_merge}"
                )
            tokens.append(t // temporal_merge * (h // merge) * (w // merge + newline))

    def take(self, run_len: int, row: int, at: int) -> Sequence[int]:
        """Indices of the grids that exactly fill a run of ``run_len`` placeholder tokens."""
        g = self.next
        if g < len(self.tokens) and self.tokens[g] == run_len:  # one grid fills the run: the usual case
            self.next = g + 1
            return (g,)
        used: list[int] = []
        left = run_len
        while left > 0:
            if self.next >= len(self.rows):
                raise TokenError(
                    f"row {row}, {self.name[:5]} run at valid token {at}: {run_len} placeholder tokens need "
                    f"more {self.name} grids; only {len(self.rows)} given, all used ({left} tokens left uncovered)"
                )
            need = self.tokens[self.next]
            if need > left:
                raise TokenError(
                    f"row {row}, {self.name[:5]} run at valid token {at}: {self.name}[{self.next}] = "
                    f"{self.rows[self.next]} needs {need} placeholder tokens, but the run has {left} left "
                    f"(of {run_len})"
                )
            used.append(self.next)
            self.next += 1
            left -= need
        return used

    def take_one(self, run_len: int, row: int, at: int) -> tuple[int, int]:
        """The next grid, as ``(h, w)`` patches, for a crop of exactly ``run_len`` tokens (the canvas rule)."""
        if self.next >= len(self.rows):
            raise TokenError(
                f"row {row}, crop at valid token {at}: {run_len} tokens need one more {self.name} row; only "
                f"{len(self.rows)} given, all used"
            )
        g = self.next
        if self.tokens[g] != run_len or self.rows[g][0] != 1:
            raise TokenError(
                f"row {row}, crop at valid token {at}: the canvas rule takes one (1, h, w) {self.name} row "
                f"per crop of h*w/merge^2 tokens; {self.name}[{g}] = {self.rows[g]} for a crop of {run_len}"
            )
        self.next += 1
        return self.rows[g][1], self.rows[g][2]

    def check_all_used(self) -> None:
        """Refuse grids no placeholder run used (tolerated in lenient reading: the transformers 5.x
        models take one grid per run from an iterator and never look at the rest)."""
        if self.next != len(self.rows):
            tolerate(
                f"{len(self.rows)} {self.name} rows given but the placeholder runs use {self.next}",
                _UNUSED_GRIDS,
            )


def _take_bordered(queue: GridQueue, run_len: int, row: int, at: int) -> tuple[int, bool]:
    """The one grid of an image run under the ``grid_border`` rule, and whether the run holds the two
    border tokens (``H' * (W' + 1) + 2`` tokens) or the grid alone."""
    if queue.next >= len(queue.rows):
        raise TokenError(
            f"row {row}, image run at valid token {at}: {run_len} placeholder tokens need one more "
            f"{queue.name} row; only {len(queue.rows)} given, all used"
        )
    need = queue.tokens[queue.next]
    if run_len not in (need, need + 2):
        raise TokenError(
            f"row {row}, image run at valid token {at}: {queue.name}[{queue.next}] = {queue.rows[queue.next]} "
            f"needs {need} grid tokens ({need + 2} with the two border tokens), but the run has {run_len}"
        )
    queue.next += 1
    return queue.next - 1, run_len == need + 2


def _runs_of(row_types: np.ndarray, n: int) -> TokenRuns:
    """Starts, stops and 0/1/2 kinds of the runs of equal type in one row of ``n`` token types."""
    if not n:
        return [], [], []
    change = (np.flatnonzero(row_types[1:] != row_types[:-1]) + 1).tolist()
    starts = [0, *change]
    return starts, [*change, n], row_types[starts].tolist()


_BLOCKS: dict[tuple, Block] = {}
"""The blocks of :func:`grid_block` per grid and rules (immutable there; at most 4096, then a fresh dict)."""
register("layout.grid_blocks", lambda: _BLOCKS.clear(), lambda: len(_BLOCKS), 4096)


def block_rules_key(lay: LayoutRules) -> tuple:
    """The fields of ``lay`` that shape a block besides its grid and times: half of :func:`grid_block`'s
    cache key, computed once per row."""
    return (
        lay.merge_size,
        lay.spatial,
        lay.crop,
        lay.temporal_merge_size,
        lay.row_newline,
        lay.frame_block,
        lay.temporal_stride,
        lay.vision_step,
        lay.circle_radius,
        lay.circle_alpha,
    )


def grid_block(
    queue: GridQueue, g: int, video: bool, lay: LayoutRules, rules_key: tuple
) -> tuple[Block, tuple]:
    """The block of grid ``g`` of ``queue`` (an image's, or a video's when ``video``) under ``lay``,
    whose :func:`block_rules_key` is ``rules_key``, and its template (see
    :func:`mrope._layout.pieces.block_template`).

    Blocks are immutable here and cached: the same grid under the same rules is the same block."""
    global _BLOCKS
    t, h, w = queue.rows[g]
    if not video:
        time_key: Any = t
    else:
        t //= lay.temporal_merge_size
        temporal = lay.temporal
        if temporal == "index":
            time_key = t
        elif temporal == "timestamps":
            time_key = 0
        else:
            time_key = (t, float(queue.spg[g]), lay.tokens_per_second, lay.seconds_grouping)  # type: ignore[index]
    key = (time_key, h, w, rules_key)
    block = _BLOCKS.get(key)
    if block is None:
        if time_key == 0:
            tau = ZERO_OFFSETS
        elif isinstance(time_key, int):
            tau = image_time(t, lay)  # images, and the index rule: i * temporal_stride
        else:
            tau = temporal_index(t, lay, time_key[1])
        if len(_BLOCKS) >= 4096:
            _BLOCKS = {}
        merge = lay.merge_size
        block = _BLOCKS[key] = untiled_block((t, h // merge, w // merge), tau, lay, "image", -1, 0)
    return block, block_template(block)


def run_pieces(
    runs: TokenRuns,
    row: int,
    images: GridQueue,
    videos: GridQueue,
    lay: LayoutRules,
) -> list[TextRun | Block]:
    """Text runs and vision blocks of one row, from its runs of 0/1/2 token types."""
    pieces: list[TextRun | Block] = []
    append = pieces.append
    make = tuple.__new__  # TextRun(...) without the named tuple's Python-level __new__
    bordered_rule = lay.grid_border
    rules_key = block_rules_key(lay)
    for a, z, kind in zip(*runs, strict=True):
        if kind == 0:
            append(make(TextRun, (z - a, 0, "text", -1)))
            continue
        queue = images if kind == 1 else videos
        if bordered_rule and kind == 1:
            g, bordered = _take_bordered(queue, z - a, row, a)
            block = grid_block(queue, g, False, lay, rules_key)[0]
            if bordered:
                append(make(TextRun, (1, 0, "wrapper", -1)))
                append(block)
                append(make(TextRun, (1, 0, "wrapper", -1)))
            else:
                append(block)
            continue
        for g in queue.take(z - a, row, a):
            append(grid_block(queue, g, kind == 2, lay, rules_key)[0])
    return pieces


def fill_runs(
    dense: np.ndarray,
    runs: TokenRuns,
    row: int,
    images: GridQueue,
    videos: GridQueue,
    lay: LayoutRules,
) -> int:
    """``fill_pieces(run_pieces(runs, ...), dense, None, None, lay.advance)`` in one pass: the row's
    positions written into ``dense`` ``[3, n]`` from its runs, without the list of pieces between;
    returns the largest position.

    This is the token scan's hot loop, so :func:`mrope._layout.pieces.fill_pieces`' counter rule for a
    text run and an unwrapped block is written out here rather than called (a Python call costs about
    as much as a line of numpy here); tests/layout/test_fill_runs.py holds the two equal for every
    family's rules. (Under the ``grid_border`` rule, whose image runs may carry border tokens, the
    pieces are planned and filled as such.)"""
    if lay.grid_border:
        return fill_pieces(run_pieces(runs, row, images, videos, lay), dense, None, None, lay.advance)
    spatial = lay.advance == "spatial"
    own = lay.advance in OWN_ADVANCES
    rules_key = block_rules_key(lay)
    s = 0  # start of the next piece
    top = -1  # largest position so far
    for a, z, kind in zip(*runs, strict=True):
        n = z - a
        if kind == 0:  # text: s .. s + n - 1 on every axis
            if s + n > MAX_POSITION:
                raise LayoutError(
                    f"row {row}, text at token {a}: positions overflow: would reach {s + n - 1:,}"
                )
            write_text(dense, a, z, s)
            s += n
            if s > top:
                top = s - 1
            continue
        queue = images if kind == 1 else videos
        for g in queue.take(n, row, a):
            block, (template, top_t, top_hw) = grid_block(queue, g, kind == 2, lay, rules_key)
            b = a + block.n
            hw = s if block.anchored else 0
            high = max(s + top_t, hw + top_hw)
            if high > MAX_POSITION:
                raise LayoutError(
                    f"row {row}, {queue.name}[{g}] at token {a}: positions overflow: would reach {high:,}"
                )
            add_template(template, s, hw, dense[:, a:b])
            a = b
            if own:
                top, s = advance_own(lay.advance, s, top, high, top_t, top_hw)
                continue
            if high > top:
                top = high
            s = s + max(block.span_h, block.span_w) if spatial else top + 1
    return top


def _wrapped_video_types(row_ids: np.ndarray, pad_id: int, lay: LayoutRules) -> np.ndarray:
    """0/1/2 token types when images and videos share one pad id (GLM-4.1V): pads after more
    ``video_start_id`` than ``video_end_id`` tokens are video (2), the others image (1), as the
    processor's ``create_mm_token_type_ids`` decides."""
    inside = np.cumsum(row_ids == lay.video_start_id) > np.cumsum(row_ids == lay.video_end_id)
    pads = row_ids == pad_id
    return (pads.view(np.int8) + (pads & inside).view(np.int8)).astype(np.int8)


def _wrapped_types(row_ids: np.ndarray, lay: LayoutRules) -> tuple[np.ndarray, int]:
    """Token types of one row under the ``between_wrappers`` image rule: 1 for the tokens strictly
    between each ``vision_start_id`` and the next ``vision_end_id``; also how many such images.

    A start with no end after it (the start of an image to generate) leaves its tokens as text."""
    types = np.zeros(row_ids.shape[0], dtype=np.int8)
    starts = np.flatnonzero(row_ids == lay.vision_start_id).tolist()
    ends = np.flatnonzero(row_ids == lay.vision_end_id).tolist()
    if len(ends) > len(starts) or any(e <= s for s, e in zip(starts, ends, strict=False)):
        raise TokenError(
            f"image wrappers out of order: vision_start_id {lay.vision_start_id} at {starts}, "
            f"vision_end_id {lay.vision_end_id} at {ends}"
        )
    for k, (s, e) in enumerate(zip(starts, ends, strict=False)):
        if k + 1 < len(starts) and starts[k + 1] < e:
            raise TokenError(
                f"image wrappers nest: a vision_start_id at {starts[k + 1]} before the end at {e}"
            )
        types[s + 1 : e] = 1
    return types, len(ends)


def _valid_spans(mask_runs: BatchRuns | None, b: int, length: int) -> list[tuple[int, int, bool]]:
    """Per row, where its valid tokens lie: ``(first, last, holed)``, the slice ``[first, last)`` that
    holds them and whether masked tokens lie between them (more than one run of ones).

    ``mask_runs`` are the runs of the validated 0/1 ``[B, L]`` mask (``None``: every token is valid):
    a row's layout, padded on either side or not, is read from its runs without another pass."""
    if mask_runs is None:
        return [(0, length, False)] * b
    spans: list[tuple[int, int, bool]] = []
    for row in range(b):
        starts, stops, kinds = mask_runs.row(row, 0, length)
        ones = [k for k, kind in enumerate(kinds) if kind]
        if not ones:
            spans.append((0, 0, False))
        else:
            spans.append((starts[ones[0]], stops[ones[-1]], len(ones) > 1))
    return spans


ScanResult = tuple[np.ndarray, np.ndarray, list[np.ndarray | None]]
"""What a token-id scan returns: positions ``[A, B, L]``, deltas ``[B]`` and per row the positions of the
images to generate (or ``None``)."""


class ScanRow(NamedTuple):
    """One row of the token-id scan, as the batch loop hands it to an engine's row filler."""

    dense: np.ndarray  # int64 [A, n]: where the row's positions go (n valid tokens)
    runs: TokenRuns  # the row's runs of 0/1/2 token types (or its own types' runs)
    ids: np.ndarray | None  # the row's valid token ids, or None when the runs alone fill it
    types: np.ndarray | None  # the row's valid 0/1/2 token types, or None likewise
    row: int
    images: GridQueue
    videos: GridQueue
    rules: LayoutRules
    image_index: int  # the image index the row starts at (the sequence positions rule)


RowFiller = Callable[[ScanRow], tuple[int, int]]
"""An engine's row of the scan: writes the row's positions into ``scan.dense`` and returns ``(largest
position, next image index)``."""


def _image_queues(
    image_grid_thw: Any, images_per_sample: Any, lay: LayoutRules, b: int
) -> tuple[list[GridQueue], np.ndarray | None]:
    """Per row of ``b``, the queue of image grids it takes from: one queue per row when
    ``images_per_sample`` splits the grids between rows, else one queue the rows share; and the
    validated ``images_per_sample`` (``None`` when not given)."""
    merge, newline = lay.merge_size, int(lay.row_newline)
    image_grids = grid_rows(image_grid_thw, "image_grid_thw")
    per_sample = as_numpy(images_per_sample, "images_per_sample")
    if per_sample is None:
        if lay.generates_images and b > 1 and len(image_grids):
            raise TokenError(
                f"the {lay.name!r} rules generate images: with {b} rows, pass images_per_sample (the "
                "processor's count of grids per row, images to generate included)"
            )
        return [GridQueue("image_grid_thw", image_grids, merge, None, 1, newline)] * b, None
    per_sample = per_sample.reshape(-1)
    if (
        per_sample.dtype.kind not in "iu"
        or per_sample.size != b
        or np.any(per_sample < 0)
        or int(per_sample.sum()) != len(image_grids)
    ):
        raise TokenError(
            f"images_per_sample must hold {b} counts >= 0 summing to the {len(image_grids)} "
            f"image_grid_thw rows; got {per_sample.tolist()}"
        )
    bounds = np.concatenate([[0], np.cumsum(per_sample)]).tolist()
    queues = [
        GridQueue("image_grid_thw", image_grids[bounds[r] : bounds[r + 1]], merge, None, 1, newline)
        for r in range(b)
    ]
    return queues, per_sample


def _video_queue(
    video_grid_thw: Any, second_per_grid_ts: Any, lay: LayoutRules, images_only: bool
) -> GridQueue:
    """The queue of video grids the batch shares, each with its seconds per temporal patch (1.0 when
    not given); under the timestamps rule one ``(1, H, W)`` grid per temporal patch, as the model splits
    them. ``images_only``: the engine refuses video grids."""
    videos_grid = grid_rows(video_grid_thw, "video_grid_thw")
    if second_per_grid_ts is None:
        spg_list = [1.0] * len(videos_grid)
    else:
        spg_list = seconds_per_grid(second_per_grid_ts, len(videos_grid)).tolist()  # type: ignore[union-attr]
    if lay.temporal == "timestamps":
        spg_list = [x for (t, _, _), x in zip(videos_grid, spg_list, strict=True) for _ in range(t)]
        videos_grid = [[1, h, w] for t, h, w in videos_grid for _ in range(t)]
    videos = GridQueue(
        "video_grid_thw", videos_grid, lay.merge_size, spg_list, lay.temporal_merge_size, int(lay.row_newline)
    )
    if images_only and len(videos_grid):
        raise TokenError(f"the {lay.name!r} rules (sequence positions) take images only; got video grids")
    return videos


def scan_batch(
    inputs: TokenInputs, fill_row: RowFiller, *, per_row_types: bool = False, images_only: bool = False
) -> ScanResult:
    """Positions ``[A, B, L]``, deltas ``[B]`` and per row the positions of the images to generate (or
    ``None``) of a batch of token ids, each row filled by the engine's ``fill_row``.

    ``per_row_types``: the engine reads each row's token ids and types (the canvas rule), so the rows
    are scanned one by one rather than from the batch's runs. ``images_only``: the engine refuses video
    grids (sequence positions)."""
    ids, mask, mask_runs, types = inputs.ids, inputs.mask, inputs.mask_runs, inputs.types
    lay, pad_position = inputs.rules, inputs.pad_position
    b, length = ids.shape
    # rules whose rows are scanned one by one (their own token types); the others take the batch's runs
    per_row_scan = per_row_types or lay.image_span == "between_wrappers"
    if per_row_scan:
        check_type_values(types)  # (otherwise checked on the batch's runs, below)
    row_images, per_sample = _image_queues(inputs.image_grid_thw, inputs.images_per_sample, lay, b)
    videos = _video_queue(inputs.video_grid_thw, inputs.second_per_grid_ts, lay, images_only)

    axes = lay.num_axes
    dtype = position_dtype(lay)
    out = inputs.out if inputs.out is not None else np.empty((axes, b, length), dtype=dtype)
    deltas = np.zeros(b, dtype=dtype)
    generation: list[np.ndarray | None] = [None] * b
    image_id, video_id = lay.image_pad_id, lay.video_pad_id
    shared_id = image_id == video_id  # GLM-4.1V: video frames carry the image id inside a video wrapper
    batch_runs: BatchRuns | PadRuns | None = None
    if per_row_scan:
        if types is None and not shared_id and lay.image_span != "between_wrappers":
            # 0 text, 1 image, 2 video for the whole batch at once (int8 adds; an int8 shift costs more)
            types = (ids == video_id).view(np.int8)
            types += types  # in place: the comparison's own buffer
            types += (ids == image_id).view(np.int8)
    elif types is not None:
        batch_runs = BatchRuns(types)  # the runs of the type ids, whose kinds bound their values
        if not batch_runs.within(2):
            raise TokenError(TYPES_ERROR)
    elif not shared_id:
        batch_runs = PadRuns(ids, image_id, video_id)  # the placeholder runs of the whole batch at once
    image_index = 0
    for row, (first, last, holed) in enumerate(_valid_spans(mask_runs, b, length)):
        # where the row's positions go: a view of its slice when its valid tokens are contiguous
        if first:
            out[:, row, :first] = pad_position
        if last < length:
            out[:, row, last:] = pad_position
        images = row_images[row]
        valid = np.flatnonzero(mask[row]) if holed else None  # type: ignore[index]
        if valid is None:
            n = last - first
            target = out[:, row, first:last]
            if batch_runs is not None:
                runs = batch_runs.row(row, first, last)
                row_ids = row_types = None  # the engine fills from the runs alone
            else:
                row_ids, row_types = ids[row, first:last], None if types is None else types[row, first:last]
        else:
            n = len(valid)
            row_ids, row_types = ids[row, valid], None if types is None else types[row, valid]
            out[:, row, first:last] = pad_position  # the masked slots between valid ones
            target = None
            if batch_runs is not None:  # the runs of the row's valid types, or of its valid ids
                runs = (
                    _runs_of(row_types, n)
                    if row_types is not None
                    else PadRuns(row_ids[None], image_id, video_id).row(0, 0, n)
                )
        if batch_runs is None:
            if lay.image_span == "between_wrappers":
                row_types, _ = _wrapped_types(row_ids, lay)
            elif row_types is None:  # shared pad id: the video wrappers tell videos from images
                row_types = _wrapped_video_types(row_ids, image_id, lay)
            runs = _runs_of(row_types, n)
        dense = target if target is not None else np.empty((axes, n), dtype=dtype)
        top, image_index = fill_row(
            ScanRow(dense, runs, row_ids, row_types, row, images, videos, lay, image_index)
        )
        if target is None:
            out[:, row, valid] = dense
        deltas[row] = plan_delta(top, n, lay)
        if lay.generates_images and (per_sample is not None or row == b - 1):
            # grids left after the row's images are the images the model will generate
            try:
                generation[row] = target_positions(top + 1, images.rows[images.next :], lay.merge_size)
            except LayoutError as exc:
                raise TokenError(f"row {row}: {exc}") from None
            images.next = len(images.rows)
    if lay.generates_images:
        deltas[:] = 0
    for queue in row_images if per_sample is not None else row_images[:1]:  # one shared queue, or one per row
        queue.check_all_used()
    videos.check_all_used()
    return out, deltas, generation


__all__ = [
    "GridQueue",
    "RowFiller",
    "ScanResult",
    "ScanRow",
    "block_rules_key",
    "fill_runs",
    "grid_block",
    "run_pieces",
    "scan_batch",
]
