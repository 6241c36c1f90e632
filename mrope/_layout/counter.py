"""The counter engine (the default, Qwen-style ``1 + max``): planning, token count and token-id scan row.

Each piece starts at ``s = 1 + max(all positions so far)`` (transformers 5.24
models/qwen2_vl/modeling_qwen2_vl.py:895, ``get_rope_index``); the rules' variants (tiles, centred or
reset blocks, row newlines, grid borders, timestamp text, video wrappers of their own, images to
generate) are planned here and filled by :func:`mrope._layout.pieces.fill_pieces`. The plans of images and
videos are cached per rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mrope._errors import LayoutError
from mrope._grid import (
    TEXT_FILL_ID,
    counter_top,
    frame_tokens,
    image_time,
    merged_grid,
    plan_delta,
    position_dtype,
    target_positions,
    temporal_index,
)
from mrope._layout.interface import LayoutEngine
from mrope._layout.pieces import (
    Block,
    TextRun,
    fill_pieces,
    piece_spans,
    untiled_block,
    wrapped_block,
)
from mrope._layout.plan_cache import SegmentPlan, remember_plan, segment_plans, small_plan
from mrope._layout.plan_program import plan_program, walk_pieces
from mrope._layout.tiles import tile_blocks
from mrope._layout.token_inputs import TokenInputs
from mrope._layout.token_scan import ScanResult, ScanRow, fill_runs, scan_batch
from mrope._positions import Positions, Span, filled_on_read, grid_array, positions_with_lazy_spans
from mrope._rules import LayoutRules
from mrope._segments import Audio, Image, Segment, Text, Video
from mrope._tokenizer import encode_text


def _no_audio(seg: Audio | Video, index: int, rules: LayoutRules) -> LayoutError:
    """The error for an audio clip (or a video with its audio) under rules without audio."""
    what = "an Audio" if isinstance(seg, Audio) else "a Video with audio"
    return LayoutError(
        f"segment {index} is {what}, but the {rules.name!r} rules have no audio; use an omni "
        "model such as 'qwen2.5-omni' or 'qwen3-omni'"
    )


def _tokenize(tokenizer: Any, text: str) -> list[int]:
    out = encode_text(tokenizer, text)
    if not out:
        raise LayoutError(f"tokenizer returned no tokens for the timestamp {text!r}")
    return out


class CounterPlan:
    """Pieces of one sequence under the counter rule, plus the grids the processors would report.

    The sequence and canvas engines plan with subclasses; the class attributes say what differs."""

    caches_plans = True
    """Whether image and video plans are cached per rules (their pieces fill by :func:`fill_pieces`)."""
    takes_tiles = True
    """Whether images may be tiled (``Image(tiles=...)``)."""
    takes_videos = True
    """Whether videos may be planned (the sequence positions rule takes images only)."""
    pieces_are_positions = True
    """Whether the pieces alone give the positions (the sequence and canvas rules write more over them)."""

    def __init__(self, rules: LayoutRules) -> None:
        self.rules = rules
        self.pieces: list[TextRun | Block] = []
        self.image_grids: list[tuple[int, int, int]] = []
        self.video_grids: list[tuple[int, int, int]] = []
        self.second_per_grid: list[float] = []
        self.notes: list[str] = []
        self.targets: list[tuple[int, int, int]] = []  # images the model will generate
        self.owners: list[int] = []  # index of the segment of each piece
        self.cache: dict[Segment, SegmentPlan] | None = None  # this rules' segment plans (lazy)
        # which segments have cacheable plans: images and videos under the counter rule, but videos
        # under the timestamps rule (their plan holds tokenizer output)
        self.cache_images = self.caches_plans
        self.cache_videos = self.cache_images and rules.temporal != "timestamps"

    def text(self, n: int, token_ids: Sequence[int] | int, kind: str, index: int) -> None:
        if n:
            self.pieces.append(TextRun(n, token_ids, kind, index))

    def wrapped(self, index: int, wrap: bool, body: Callable[[], None]) -> None:
        if wrap:
            self.text(1, self.rules.vision_start_id, "wrapper", index)
        body()
        if wrap:
            self.text(1, self.rules.vision_end_id, "wrapper", index)

    def add(self, seg: Segment, index: int, tokenizer: Any) -> None:
        """Plan segment ``index``: its pieces (owned by ``index``) and the grids it reports."""
        self.extend((seg,), tokenizer, index)

    def extend(self, segments: Sequence[Segment], tokenizer: Any, first_index: int = 0) -> None:
        """Plan ``segments`` (indices from ``first_index``) in order: each one's pieces (owned by its
        index) and the grids it reports.

        An image or video depends only on its own fields and the rules (not on its place), so its
        plan is cached per rules and reused by every later occurrence (see :mod:`mrope._layout.plan_cache`);
        only Qwen3-VL-style timestamp videos (tokenizer-dependent), notes and big plans are redone.
        Text and cached plans are taken here in the loop (the commonest segments: no call per segment)."""
        pieces, owners, new = self.pieces, self.owners, tuple.__new__
        cache_images, cache_videos = self.cache_images, self.cache_videos
        for index, seg in enumerate(segments, first_index):
            kind = type(seg)
            if self.targets:  # only images to generate may follow one (the planner says so)
                self._add(seg, index, tokenizer, False)
                continue
            if kind is Text:
                n = seg.num_tokens
                if n:
                    ids = seg.token_ids
                    pieces.append(new(TextRun, (n, TEXT_FILL_ID if ids is None else ids, "text", index)))
                    owners.append(index)
                continue
            if kind is Image:
                cacheable = cache_images and not seg.generate
            else:
                cacheable = kind is Video and cache_videos and seg.audio is None
            if cacheable:
                cache = self.cache
                if cache is None:
                    cache = self.cache = segment_plans(self.rules)
                try:
                    hit = cache.get(seg)
                except TypeError:  # a field that cannot be hashed: plan it every time
                    hit, cacheable = None, False
                if hit is not None:
                    hit_pieces = hit[0]
                    if len(hit_pieces) == 1:
                        pieces.append(hit_pieces[0])
                        owners.append(index)
                    else:
                        pieces += hit_pieces
                        owners += [index] * len(hit_pieces)
                    if kind is Image:
                        self.image_grids += hit[1]
                    else:
                        self.video_grids += hit[2]
                        self.second_per_grid += hit[3]
                    continue
            self._add(seg, index, tokenizer, cacheable)

    def _add(self, seg: Segment, index: int, tokenizer: Any, cacheable: bool) -> None:
        """Plan one segment afresh (and cache its plan when ``cacheable``)."""
        rules = self.rules
        first, images, videos, notes = (
            len(self.pieces),
            len(self.image_grids),
            len(self.video_grids),
            len(self.notes),
        )
        self._plan(seg, index, tokenizer)
        pieces = self.pieces[first:]
        if cacheable:
            fused = wrapped_block(pieces, rules.advance)
            if fused is not None:
                pieces = self.pieces[first:] = [fused]
        self.owners += [index] * len(pieces)
        if cacheable and len(self.notes) == notes and small_plan(seg, pieces):
            remember_plan(
                self.cache,  # type: ignore[arg-type]
                seg,
                SegmentPlan(
                    tuple(pieces),
                    tuple(self.image_grids[images:]),
                    tuple(self.video_grids[videos:]),
                    tuple(self.second_per_grid[videos:]),
                ),
            )

    def _plan(self, seg: Segment, index: int, tokenizer: Any) -> None:
        if self.targets and not (isinstance(seg, Image) and seg.generate):
            raise LayoutError(
                f"segment {index}: images to generate (Image(..., generate=True)) must come after every "
                "other segment"
            )
        if isinstance(seg, Image) and seg.generate:
            if not self.rules.generates_images:
                raise LayoutError(
                    f"segment {index}: Image(..., generate=True) needs rules that generate images "
                    f"(generates_images=True, as GLM-Image's); the {self.rules.name!r} rules do not"
                )
            merged_grid(seg.grid, self.rules.merge_size, f"image to generate (segment {index})")
            self.image_grids.append(seg.grid)
            self.targets.append(seg.grid)
            return
        if isinstance(seg, Text):
            ids = seg.token_ids if seg.token_ids is not None else TEXT_FILL_ID
            self.text(seg.num_tokens, ids, "text", index)
        elif isinstance(seg, Image):
            self.plan_image(seg, index)
        elif isinstance(seg, Video):
            self.plan_video(seg, index, tokenizer)
        elif isinstance(seg, Audio):
            raise _no_audio(seg, index, self.rules)
        else:
            raise LayoutError(
                f"segment {index} is a {type(seg).__name__}; expected mrope.Text, mrope.Image or mrope.Video"
            )

    def plan_image(self, seg: Image, index: int) -> None:
        """An image: its block (or tiles), wrapped when ``seg.wrap``."""
        if seg.thumbnail_grid is not None:
            raise LayoutError(
                f"image (segment {index}): a sliced picture (tiles with thumbnail_grid) needs the canvas "
                f"rule; the {self.rules.name!r} rules have positions_base={self.rules.positions_base!r}"
            )
        self.image_grids.append(seg.grid)
        self.wrapped(index, seg.wrap, lambda: self._image(seg, index))

    def plan_video(self, seg: Video, index: int, tokenizer: Any) -> None:
        """A video: one block, or under the timestamps rule one block per temporal patch with its time text."""
        if seg.audio is not None:
            raise _no_audio(seg, index, self.rules)
        self._video(seg, index, tokenizer)

    def _image(self, img: Image, index: int) -> None:
        rules = self.rules
        merged = merged_grid(img.grid, rules.merge_size, f"image (segment {index})")
        tau = image_time(merged[0], rules)
        if img.tiles is None:
            if rules.grid_border:  # placeholders too (type 1 for the processor), outside the grid
                self.text(1, rules.image_pad_id, "image", index)
            self.pieces.append(
                untiled_block(merged, tau, rules, "image", index, rules.image_pad_id, img.origin)
            )
            if rules.grid_border:
                self.text(1, rules.image_pad_id, "image", index)
            return
        if rules.row_newline or rules.grid_border or not self.takes_tiles or rules.spatial == "symmetric":
            raise LayoutError(
                f"image (segment {index}): tiles are not supported under the {rules.name!r} rules "
                "(row_newline, grid_border, sequence positions or the symmetric spatial rule)"
            )
        cols, rows = img.tiles
        _, hh, ww = merged
        if hh % rows or ww % cols:
            raise LayoutError(
                f"image (segment {index}): merged grid {hh}x{ww} (h x w) does not split into {rows} rows "
                f"and {cols} columns of equal tiles"
            )
        order = np.asarray(
            img.tile_order if img.tile_order is not None else range(rows * cols), dtype=np.int64
        )
        self.pieces += tile_blocks(merged, img.tiles, order, tau, rules, index, img.origin, img.thumbnail)

    def _video(self, vid: Video, index: int, tokenizer: Any) -> None:
        rules = self.rules
        if vid.tiles is not None:
            raise LayoutError(
                f"video (segment {index}): sliced frames (tiles, thumbnail_grid) need the canvas rule; the "
                f"{rules.name!r} rules have positions_base={rules.positions_base!r}"
            )
        if not self.takes_videos:
            raise LayoutError(
                f"video (segment {index}): the {rules.name!r} rules (sequence positions) take images only"
            )
        if rules.video_support == "none":
            raise LayoutError(
                f"video (segment {index}): the {rules.name!r} model takes images only (its get_rope_index has "
                "no video grids; rules.video_support='none')"
            )
        merged = merged_grid(
            vid.grid, rules.merge_size, f"video (segment {index})", rules.temporal_merge_size
        )
        spg = vid.resolved_second_per_grid(rules.temporal_patch_size, rules.fps)
        self.video_grids.append(vid.grid)
        self.second_per_grid.append(spg)
        if rules.temporal != "timestamps":
            tau = temporal_index(merged[0], rules, spg)
            if merged[0] > 1 and np.any(np.diff(tau) == 0):
                dup = int(np.flatnonzero(np.diff(tau) == 0)[0])
                self.notes.append(
                    f"video (segment {index}): temporal patches {dup} and {dup + 1} share t offset "
                    f"{int(tau[dup])} (second_per_grid {spg:g} s x tokens_per_second "
                    f"{rules.tokens_per_second:g} < 1): time resolution is lost above "
                    f"{rules.tokens_per_second * rules.temporal_patch_size:g} fps"
                )
            block = untiled_block(merged, tau, rules, "video", index, rules.video_pad_id)
            if vid.wrap and rules.video_start_id is not None:  # a video wrapper of its own (ERNIE-4.5-VL)
                self.text(1, rules.video_start_id, "wrapper", index)
                self.pieces.append(block)
                if rules.video_end_id is not None:
                    self.text(1, rules.video_end_id, "wrapper", index)
            else:
                self.wrapped(index, vid.wrap, lambda: self.pieces.append(block))
            return
        # timestamps rule: one (1, H', W') block per temporal patch, each with its time text
        frame = (1, merged[1], merged[2])
        zero_tau = np.zeros(1, dtype=np.int64)
        if vid.wrap and tokenizer is None:
            raise LayoutError(
                f"video (segment {index}) under the {rules.name!r} rules needs timestamp text tokens: pass "
                "tokenizer= (a callable str -> list[int] or a tokenizers.Tokenizer) to the builder, "
                "or Video(..., wrap=False) for bare vision tokens"
            )
        times = (
            vid.patch_times(rules.temporal_patch_size, rules.fps, rules.timestamp_time)
            if vid.wrap
            else [0.0] * merged[0]
        )
        cache: dict[str, list[int]] = {}

        def stamp(x: float) -> None:
            text = rules.format_timestamp(x)
            if text not in cache:
                cache[text] = _tokenize(tokenizer, text)
            self.text(len(cache[text]), cache[text], "timestamp", index)

        outer = vid.wrap and rules.video_start_id is not None
        if outer:
            self.text(1, rules.video_start_id, "wrapper", index)
        for x in times:
            if vid.wrap and rules.timestamp_position == "before":
                stamp(x)
            self.wrapped(
                index,
                vid.wrap,
                lambda: self.pieces.append(
                    untiled_block(frame, zero_tau, rules, "video", index, rules.video_pad_id)
                ),
            )
            if vid.wrap and rules.timestamp_position == "after":
                stamp(x)
        if outer and rules.video_end_id is not None:
            self.text(1, rules.video_end_id, "wrapper", index)

    # ------------------------------------------------------------------------------------ filling

    @property
    def num_tokens(self) -> int:
        return sum(p.n for p in self.pieces)

    def output_arrays(
        self, ids: np.ndarray | None, tokens: np.ndarray | None, total: int | None
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """``(ids [A, T], tokens [T], T)``: the caller's arrays (a batch passes views of its own rows), or
        new ones; ``total`` is :attr:`num_tokens` when the caller has it."""
        if total is None:
            total = self.num_tokens
        if ids is None:
            ids = np.empty((self.rules.num_axes, total), dtype=position_dtype(self.rules))
        if tokens is None:
            tokens = np.empty(total, dtype=np.int64)
        return ids, tokens, total

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,
        start: int = 0,
    ) -> Positions:
        """Write every piece into ``ids`` int64 ``[A, T]`` and ``tokens`` int64 ``[T]`` (new arrays when
        ``None``; a batch passes views of its own rows) and describe the result; spans are made from the
        pieces when first read. ``image_index`` is the first image index of the ``sequence`` positions
        rule (unused here); ``total`` is :attr:`num_tokens` when the caller has it; ``start``: where the
        counter stands before the first piece (0, or where a continued conversation stands; ``delta``
        is then the pieces' own, ``1 + max`` minus their count)."""
        ids, tokens, total = self.output_arrays(ids, tokens, total)
        top = fill_pieces(self.pieces, ids, tokens, None, self.rules.advance, self.owners, start)
        source = (plan_program, (self.pieces, self.rules.advance, start)) if self._plan_form() else None
        return self._described(ids, tokens, top, total, source)

    def lazy_positions(self) -> Positions:
        """:meth:`positions` (new arrays, from 0) whose ``ids`` and ``input_ids`` are written on first read:
        the delta and the program come from the plan (:func:`mrope._layout.plan_program.walk_pieces`, in
        O(pieces)), so a caller that reads only those writes no position. Where the plan form does not
        apply (see that module) or the rules' engine writes more than the pieces, filled at once."""
        lay = self.rules
        walked = walk_pieces(self.pieces, lay.advance) if self._plan_form() else None
        if walked is None:
            return self.positions()
        total = self.num_tokens

        def fill() -> tuple[np.ndarray, np.ndarray]:
            ids, tokens, _ = self.output_arrays(None, None, total)
            fill_pieces(self.pieces, ids, tokens, None, lay.advance, self.owners)
            return ids, tokens

        described = self._described(None, None, walked[1], total, (walked[0].program, (total,)))
        return filled_on_read(described, fill, total, "i")  # the program: these runs, not walked again

    def _plan_form(self) -> bool:
        """Whether the plan gives the program (:mod:`mrope._layout.plan_program`): 3 int64 axes, pieces only."""
        return self.pieces_are_positions and self.rules.num_axes == 3 and not self.rules.fractional_time

    def _described(self, ids: Any, tokens: Any, top: int, total: int, program: tuple | None) -> Positions:
        """The :class:`Positions` of the pieces (``top``: the largest position; ``program``: how
        :meth:`Positions.program` makes its program from the plan, ``None`` to compile it)."""
        lay = self.rules
        return positions_with_lazy_spans(
            piece_spans,
            (self.pieces, self.owners),
            ids,
            0 if lay.generates_images else plan_delta(top, total, lay),
            tokens,
            grid_array(self.image_grids),
            grid_array(self.video_grids),
            np.asarray(self.second_per_grid, dtype=np.float64),
            lay,
            tuple(self.notes),
            target_positions(top + 1, self.targets, lay.merge_size)
            if lay.generates_images and self.targets
            else None,
            program,
        )

    def describe(
        self, ids: np.ndarray, tokens: np.ndarray, spans: list[Span], top: int, total: int
    ) -> Positions:
        """The :class:`Positions` of filled ``ids`` and ``tokens`` with their ``spans`` (``top``: the largest
        position), for engines that write their spans as they fill."""
        lay = self.rules
        generation = None
        if lay.generates_images and self.targets:
            generation = target_positions(top + 1, self.targets, lay.merge_size)
        return Positions(
            ids=ids,
            delta=0 if lay.generates_images else plan_delta(top, total, lay),
            spans=tuple(spans),
            input_ids=tokens,
            image_grid_thw=grid_array(self.image_grids),
            video_grid_thw=grid_array(self.video_grids),
            second_per_grid_ts=np.asarray(self.second_per_grid, dtype=np.float64),
            rules=lay,
            notes=tuple(self.notes),
            generation_ids=generation,
        )


# ------------------------------------------------------------------------------------ the engine


def plan_segments(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> CounterPlan:
    """The plan of one sequence of segments (validated to be a list by the builder)."""
    plan = CounterPlan(rules)
    plan.extend(segments, tokenizer)
    return plan


def _one_token(text: str) -> list[int]:
    return [0]


def planned_tokens(
    plan_class: type[CounterPlan], seg: Segment, index: int, rules: LayoutRules, tokenizer: Any
) -> int:
    """Tokens of segment ``index`` as ``plan_class`` plans it (each timestamp text one token without a
    tokenizer)."""
    plan = plan_class(rules)
    plan.add(seg, index, tokenizer if tokenizer is not None else _one_token)
    return sum(p.n for p in plan.pieces)


def count_tokens(
    segments: Sequence[Segment],
    rules: LayoutRules,
    tokenizer: Any,
    plan_class: type[CounterPlan] = CounterPlan,
) -> int:
    """Tokens of ``segments``: a video by arithmetic (a clip of any length costs the same), anything else
    by planning it with ``plan_class``; without a tokenizer each timestamp text counts as one token."""
    lay = rules
    total = 0
    for i, seg in enumerate(segments):
        if (
            isinstance(seg, Video)
            and seg.audio is None  # audio needs audio rules: the planner says so
            and not (lay.temporal == "timestamps" and seg.wrap and tokenizer is not None)
        ):
            t, hh, ww = merged_grid(seg.grid, lay.merge_size, f"video (segment {i})", lay.temporal_merge_size)
            if lay.temporal != "timestamps":
                wrappers = 2 if lay.video_start_id is None else 1 + (lay.video_end_id is not None)
                total += t * frame_tokens(hh, ww, lay) + wrappers * seg.wrap
            else:
                outer = seg.wrap and lay.video_start_id is not None
                total += (
                    t * (frame_tokens(hh, ww, lay) + 3 * seg.wrap)
                    + outer
                    + (outer and lay.video_end_id is not None)
                )
            continue
        total += planned_tokens(plan_class, seg, i, lay, tokenizer)
    return total


def fill_row(scan: ScanRow) -> tuple[int, int]:
    """One row of the token-id scan: its runs filled into ``scan.dense`` by :func:`fill_runs`; ``(largest
    position, image_index)``."""
    return fill_runs(scan.dense, scan.runs, scan.row, scan.images, scan.videos, scan.rules), scan.image_index


def scan_token_ids(inputs: TokenInputs) -> ScanResult:
    """Positions, deltas and generation positions of a batch of token ids (see :mod:`mrope._token_ids`)."""
    return scan_batch(inputs, fill_row)


# ------------------------------------------------------------------------------------ continuing


_TEXT_KINDS = frozenset({"text", "wrapper", "timestamp"})
"""Span kinds whose tokens are 1-D text positions (the same value on every axis)."""


def next_start(positions: Positions) -> int:
    """Where the counter stands after a whole sequence: where a piece appended to it starts.

    ``1 + max`` under the ``max+1`` advance (``1 + ceil(max)`` under ``ceil``); under the others (``spatial``,
    ``block``, ``time``: ``1 + max`` does not recover them) one past the last token, which must be text."""
    if not positions.num_tokens:
        return 0
    number = float if positions.rules.fractional_time else int
    if positions.rules.advance in ("max+1", "ceil"):
        return number(counter_top(positions.ids.max().item(), positions.rules)) + 1
    last = positions.spans[-1]
    if last.kind not in _TEXT_KINDS:
        raise LayoutError(
            f"under the {positions.rules.advance} advance the counter after a sequence that ends with a "
            f"{last.kind} block "
            "is not in its positions; end the sequence with text, or continue from a state"
        )
    return number(positions.ids[0, -1]) + 1


def continue_segments(
    segments: Sequence[Segment],
    rules: LayoutRules,
    tokenizer: Any,
    start: int,
    image_index: int = 0,
    plan: Callable[[Sequence[Segment], LayoutRules, Any], Any] = plan_segments,
) -> Positions:
    """Positions of ``segments`` appended to a sequence after which the counter stands at ``start``
    (with ``image_index`` images before them): planned by ``plan`` and filled from ``start`` (the
    plan's ``positions(start=...)``), so the cost is the new tokens' alone, whatever came before. Spans
    count from the first new token and from segment 0; ``delta`` is the new tokens' own (``1 + max``
    minus their count)."""
    kinds = (int, np.integer, float, np.floating) if rules.fractional_time else (int, np.integer)
    if isinstance(start, bool) or not isinstance(start, kinds) or start < 0:
        raise LayoutError(f"start must be an int >= 0 (a number under fractional time); got {start!r}")
    start = float(start) if rules.fractional_time else int(start)
    return plan(segments, rules, tokenizer).positions(image_index=image_index, start=start)


def video_time(n_patches: int, second_per_grid: float, rules: LayoutRules) -> np.ndarray:
    """The t offsets (int64 ``[n_patches]``) of a video's temporal patches under these rules:
    :func:`mrope._grid.temporal_index` (the index, or the ``seconds`` rule's float32 product)."""
    return temporal_index(n_patches, rules, second_per_grid)


ENGINE = LayoutEngine(plan_segments, count_tokens, scan_token_ids, video_time, next_start, continue_segments)
"""The counter engine (the default: ``1 + max``)."""
