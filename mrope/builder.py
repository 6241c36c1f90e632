"""Segments -> ``[3, T]`` position ids (numpy), batches, and decode continuation.

The builder has two stages. Planning turns segments (or, in :mod:`mrope.tokens`, placeholder runs)
into a flat list of pieces: text runs and vision blocks, each with its size. Filling writes every
piece into one preallocated ``[3, T]`` int64 array with broadcast assignments, so the cost is a few
numpy calls per piece and nothing per token.

Counter rule (SPEC section 1): each piece starts at ``s = 1 + max(all positions so far)`` (0 at the
start); a text run of n tokens gets ``s .. s+n-1`` on every axis; a vision block of LLM grid
``(T', H', W')`` gets ``(s + tau(i), s + h0 + j, s + w0 + k)`` for its token ``(i, j, k)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mrope.canvas import canvas_row, check_marker_ids
from mrope.errors import LayoutError
from mrope.models import ModelLike, resolve_rules, resolve_tokenizer
from mrope.rules import LayoutRules
from mrope.segments import Audio, Image, Segment, Text, Video
from mrope.tokenizer import encode_text

if TYPE_CHECKING:
    import torch

TEXT_FILL_ID = 0
"""Token id written into :attr:`Positions.input_ids` for text given as a count only."""

MAX_POSITION = 2**62
"""Largest position the builder writes: int64 with headroom for ``position + delta`` arithmetic."""

MAX_TILES = 1 << 16
"""Most tiles one image may have (InternVL-style plans use up to a few dozen)."""

MAX_GENERATED_TOKENS = 1 << 22
"""Most tokens of images to generate per sequence (GLM-Image's largest target, 2048 px at 32 px a token,
is 4096)."""


class MRopeWarning(UserWarning):
    """Something legal but worth knowing, e.g. two video patches that share a time coordinate."""


# --------------------------------------------------------------------------------------------- output


class Span(NamedTuple):
    """A contiguous run of tokens ``[start, stop)`` that one segment produced.

    An immutable named tuple (a builder writes one per piece, so it must cost little to make).

    Attributes:
        kind: ``"text"``, ``"wrapper"`` (vision start/end), ``"timestamp"`` (Qwen3-VL time text),
            ``"image"``, ``"video"`` or ``"thumbnail"``.
        start, stop: token indices.
        index: index of the segment in the input list.
        grid: the LLM grid ``(T', H', W')`` of a vision span (per tile for tiles), else ``None``.
        tile: ``(row, col)`` of the tile a span holds, else ``None``.
    """

    kind: str
    start: int
    stop: int
    index: int
    grid: tuple[int, int, int] | None = None
    tile: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "start": self.start, "stop": self.stop, "index": self.index}
        if self.grid is not None:
            out["grid"] = list(self.grid)
        if self.tile is not None:
            out["tile"] = list(self.tile)
        return out


_SPAN_TYPES = {"image": 1, "thumbnail": 1, "video": 2}


def span_token_types(spans: Sequence[Span], n: int) -> np.ndarray:
    """int64 ``[n]`` modality types of tokens covered by ``spans``: 1 image, 2 video, 0 otherwise."""
    out = np.zeros(n, dtype=np.int64)
    for s in spans:
        kind = _SPAN_TYPES.get(s.kind)
        if kind:
            out[s.start : s.stop] = kind
    return out


@dataclass(frozen=True, eq=False)
class Positions:
    """Positions of one sequence.

    Attributes:
        ids: int64 ``[3, T]``, rows t, h, w.
        delta: ``max(ids) + 1 - T``; decode token at logical index ``i >= T`` gets ``i + delta``.
        spans: what produced each token; they cover ``[0, T)`` exactly once, in order.
        input_ids: int64 ``[T]``: the token ids the model would see (text given as a count holds
            :data:`TEXT_FILL_ID`).
        image_grid_thw, video_grid_thw: int64 ``[n, 3]`` encoder grids in order, as the processors
            give them (tiled images report their whole grid).
        second_per_grid_ts: float64 ``[n_videos]``.
        notes: things worth knowing that are not errors (e.g. video patches sharing a time).
        rules: the layout rules used.
        generation_ids: int64 ``[3, n + 1]``: under ``generates_images`` rules, the positions of the
            tokens the model will generate for the ``Image(..., generate=True)`` targets (last target
            first, then one end marker), as GLM-Image caches them; else ``None``.
        audio_tokens: int64 ``[n_audios]``: tokens of each audio clip in order (standalone and inside
            videos), for rules with audio.

    ``ids`` has ``rules.num_axes`` rows (3: t, h, w; HunyuanOCR's four: sequence, w, h, image index).
    Rules with fractional time (``time_rounding="none"``, Qwen3-Omni) give ``ids`` as float32 (the
    model's own dtype) and a float ``delta``; every other family gives int64 and an int.
    """

    ids: np.ndarray
    delta: int | float
    spans: tuple[Span, ...]
    input_ids: np.ndarray
    image_grid_thw: np.ndarray
    video_grid_thw: np.ndarray
    second_per_grid_ts: np.ndarray
    rules: LayoutRules
    notes: tuple[str, ...] = field(default=())
    audio_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    generation_ids: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[1])

    @property
    def mm_token_type_ids(self) -> np.ndarray:
        """int64 ``[T]``: 0 text (wrappers and timestamps included), 1 image, 2 video, as the transformers
        5.x processors return them (GLM-4.1V's video frames carry the image id and are still 2)."""
        return span_token_types(self.spans, self.num_tokens)

    def torch(self) -> torch.Tensor:
        """``ids`` as a torch tensor ``[3, T]`` (int64, or float32 for fractional time; shares memory)."""
        import torch

        return torch.from_numpy(self.ids)

    def metadata(self) -> dict[str, Any]:
        """Everything but the ids, JSON-ready: delta, num_tokens, spans, the grids, second_per_grid_ts,
        notes (the fields of the service's positions response besides ``positions``); ``audio_tokens``
        under rules with audio, and ``generation_ids`` (``[3][n + 1]``) when the sequence has images to
        generate (GLM-Image)."""
        out = {
            "delta": float(self.delta) if self.ids.dtype.kind == "f" else int(self.delta),
            "num_tokens": self.num_tokens,
            "spans": [s.to_dict() for s in self.spans],
            "image_grid_thw": self.image_grid_thw.tolist(),
            "video_grid_thw": self.video_grid_thw.tolist(),
            "second_per_grid_ts": self.second_per_grid_ts.tolist(),
            "notes": list(self.notes),
        }
        if self.rules.has_audio:
            out["audio_tokens"] = self.audio_tokens.tolist()
        if self.generation_ids is not None:
            out["generation_ids"] = self.generation_ids.tolist()
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"positions": [[t...], [h...], [w...]], **metadata()}``."""
        return {"positions": self.ids.tolist(), **self.metadata()}

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy the spans themselves, never the pieces they are made from."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def window(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[A, stop - start]`` of tokens ``start .. stop-1`` of a sequence that begins with
        this prompt: the prompt's own positions where they exist, decode continuation past its end
        (``i + delta`` on every axis; under ``generates_images`` rules the :attr:`generation_ids`, which
        end after the generated images' end marker).

        This is how chunked prefill and decode stay in one coordinate system: slice, never rebuild.
        """
        if not (0 <= start <= stop):
            raise LayoutError(f"window needs 0 <= start <= stop; got start={start}, stop={stop}")
        t = self.num_tokens
        inside = self.ids[:, start : min(stop, t)]
        if stop <= t:
            return inside.copy()
        first = max(start, t)
        if self.generation_ids is not None:
            if stop - t > self.generation_ids.shape[1]:
                raise LayoutError(
                    f"window up to token {stop}: this prompt of {t} tokens decodes "
                    f"{self.generation_ids.shape[1]} generated tokens (its images and one end marker)"
                )
            after = self.generation_ids[:, first - t : stop - t]
        else:
            after = next_positions(self.delta, first, stop - first)[:1]
        return np.concatenate([inside, np.broadcast_to(after, (self.ids.shape[0], stop - first))], axis=1)


class _PieceSpans:
    """``Positions.spans`` of a sequence the builder filled: made on first read from the plan's pieces
    (kept until then under ``_span_pieces``), then kept in the instance (which then shadows this
    non-data descriptor). Building a batch thus writes no span that nobody reads."""

    def __get__(self, obj: Positions | None, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError("spans")  # a required field: no class-level default
        state = obj.__dict__
        source = state.get("_span_pieces")
        if source is None:  # another thread made them in between
            return state["spans"]
        spans = state["spans"] = tuple(piece_spans(*source))
        state.pop("_span_pieces", None)
        return spans


Positions.spans = _PieceSpans()  # type: ignore[assignment,misc]


def _filled_positions(
    ids: np.ndarray,
    delta: int,
    pieces: list[TextRun | Block],
    owners: list[int],
    input_ids: np.ndarray,
    image_grid_thw: np.ndarray,
    video_grid_thw: np.ndarray,
    second_per_grid_ts: np.ndarray,
    rules: LayoutRules,
    notes: tuple[str, ...],
    generation_ids: np.ndarray | None,
) -> Positions:
    """A :class:`Positions` whose spans are made from ``pieces`` on first read (same fields as the
    dataclass constructor gives; made without its frozen ``__setattr__`` per field)."""
    out = object.__new__(Positions)
    out.__dict__.update(
        ids=ids,
        delta=delta,
        _span_pieces=(pieces, owners),
        input_ids=input_ids,
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
        rules=rules,
        notes=notes,
        audio_tokens=np.zeros(0, dtype=np.int64),
        generation_ids=generation_ids,
    )
    return out


@dataclass(frozen=True, eq=False)
class Batch:
    """Positions of a padded batch.

    Attributes:
        ids: int64 ``[A, B, L]`` (A = ``rules.num_axes``, 3 but for HunyuanOCR; float32 for fractional
            time, Qwen3-Omni); pad slots hold ``pad_position``.
        attention_mask: int64 ``[B, L]``, 1 at valid tokens.
        deltas: int64 ``[B]`` (float32 with fractional time).
        input_ids: int64 ``[B, L]`` (pad slots hold ``pad_token_id``).
        sequences: the per-sample :class:`Positions`; their ``ids`` and ``input_ids`` are views of this
            batch's rows (they share memory with ``ids`` and ``input_ids``).
    """

    ids: np.ndarray
    attention_mask: np.ndarray
    deltas: np.ndarray
    input_ids: np.ndarray
    sequences: tuple[Positions, ...]

    @property
    def mm_token_type_ids(self) -> np.ndarray:
        """int64 ``[B, L]``: each sequence's :attr:`Positions.mm_token_type_ids` at its valid tokens, 0 at pads."""
        out = np.zeros(self.attention_mask.shape, dtype=np.int64)
        for row, p in enumerate(self.sequences):
            out[row, self.attention_mask[row].astype(bool)] = p.mm_token_type_ids
        return out

    @property
    def image_grid_thw(self) -> np.ndarray:
        """int64 ``[n, 3]``: every sequence's image grids, in order (images to generate included)."""
        return np.concatenate([p.image_grid_thw for p in self.sequences]).reshape(-1, 3)

    @property
    def images_per_sample(self) -> np.ndarray:
        """int64 ``[B]``: how many of :attr:`image_grid_thw` belong to each sequence (GLM-Image's
        ``images_per_sample``)."""
        return np.asarray([len(p.image_grid_thw) for p in self.sequences], dtype=np.int64)

    def __repr__(self) -> str:
        """A summary (shapes, valid lengths, deltas), never the arrays themselves."""
        axes, rows, length = self.ids.shape
        valid = self.attention_mask.sum(axis=1).tolist()
        shown = 8
        lengths = ", ".join(map(str, valid[:shown])) + (", ..." if rows > shown else "")
        deltas = ", ".join(f"{d:g}" for d in self.deltas.tolist()[:shown]) + (", ..." if rows > shown else "")
        rules = self.sequences[0].rules.name if self.sequences else "?"
        return (
            f"Batch({rules}: {rows} sequences x {length} slots, {axes} axes, {self.ids.dtype}; "
            f"valid tokens [{lengths}]; deltas [{deltas}])"
        )

    def torch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(position_ids [3, B, L], attention_mask [B, L], deltas [B, 1])`` as torch tensors."""
        import torch

        return (
            torch.from_numpy(self.ids),
            torch.from_numpy(self.attention_mask),
            torch.from_numpy(self.deltas).unsqueeze(1),
        )


# ----------------------------------------------------------------------------------------- pieces
# The planner's pieces. Public because the token interface (mrope.tokens) plans rows into the same
# pieces and fills them with the same :func:`fill_pieces`; they are not part of the package API.


class TextRun(NamedTuple):
    """A run of ``n`` text tokens (ids: one per token, or one id repeated) from segment ``index``.

    An immutable named tuple: the planners make one per text run, so it must cost little to make."""

    n: int
    token_ids: Sequence[int] | int
    kind: str
    index: int


@dataclass
class Block:
    """A vision block: ``n_tiles`` tiles of ``T' x tile_h x tile_w`` tokens, emitted tile, t, h, w.

    ``tile_h0`` / ``tile_w0`` hold each tile's offset in the block (0 for an untiled block).
    """

    tau: np.ndarray  # int64 [T']
    tile_h: int
    tile_w: int
    tile_h0: np.ndarray  # int64 [n_tiles]
    tile_w0: np.ndarray  # int64 [n_tiles]
    h0: int  # spatial offset of the whole block (centering, crop origin)
    w0: int
    span_h: int  # merged extent of the whole block, for the "spatial" advance rule
    span_w: int
    kind: str
    index: int
    token_id: int
    tiles: Sequence[tuple[int, int]] | None = None  # (row, col) of each tile, for spans
    anchored: bool = True  # h and w count from the block start s (False: from 0, the "reset" rule)
    follow_t: bool = False  # h and w also carry each frame's t offset (the frame_block rule)
    wrap: tuple[int, int] | None = None  # (start id, end id): one wrapper token before and after
    advance: str = "max+1"  # the advance rule, which places the end wrapper of a wrapped block
    n: int = field(init=False)  # tokens in the block (wrappers included)
    template_key: tuple | None = field(init=False, default=None)  # its key in the template cache
    tile_grid: tuple[int, int, int] = field(init=False)  # (T', tile_h, tile_w), as its spans report it

    def __post_init__(self) -> None:
        self.tile_grid = (len(self.tau), self.tile_h, self.tile_w)
        self.n = len(self.tau) * self.tile_h * self.tile_w * len(self.tile_h0) + 2 * (self.wrap is not None)


def untiled_block(
    merged: tuple[int, int, int],
    tau: np.ndarray,
    rules: LayoutRules,
    kind: str,
    index: int,
    token_id: int,
    origin: tuple[int, int] = (0, 0),
) -> Block:
    _, hh, ww = merged
    cols = ww + rules.row_newline  # the row_newline rule: one more token, at column W', ends every row
    h0, w0 = _spatial_offset(hh, cols, rules, origin)
    follow_t = rules.frame_block and len(tau) > 1
    if follow_t:  # the frame_block rule: frame f starts a block of side max(H', columns)
        tau = np.arange(len(tau), dtype=np.int64) * max(hh, cols)
    return Block(
        tau,
        hh,
        cols,
        _ZERO,
        _ZERO,
        h0,
        w0,
        hh,
        cols,
        kind,
        index,
        token_id,
        anchored=rules.spatial != "reset",
        follow_t=follow_t,
    )


_ZERO = np.zeros(1, dtype=np.int64)
_ZERO.flags.writeable = False


def _spatial_offset(hh: int, ww: int, rules: LayoutRules, origin: tuple[int, int]) -> tuple[int, int]:
    h0 = w0 = 0
    if rules.spatial == "centered":
        side = max(hh, ww)
        h0, w0 = (side - hh) // 2, (side - ww) // 2
    if rules.crop == "keep":
        h0, w0 = h0 + origin[0], w0 + origin[1]
    return h0, w0


def merged_grid(
    grid: Sequence[int], merge_size: int, what: str = "vision", temporal_merge_size: int = 1
) -> tuple[int, int, int]:
    """Encoder grid ``(t, h, w)`` -> LLM grid ``(t / tm, h / m, w / m)``; h and w must divide by ``m``
    and t by ``tm`` (``temporal_merge_size``, 1 for images)."""
    t, h, w = (int(v) for v in grid)
    if min(t, h, w) < 1:
        raise LayoutError(f"{what} grid must be positive (t, h, w); got {tuple(grid)}")
    if h % merge_size or w % merge_size:
        raise LayoutError(
            f"{what} grid {(t, h, w)}: h and w must be multiples of the merge size {merge_size}"
        )
    if t % temporal_merge_size:
        raise LayoutError(
            f"{what} grid {(t, h, w)}: t must be a multiple of the temporal merge size {temporal_merge_size}"
        )
    return t // temporal_merge_size, h // merge_size, w // merge_size


def frame_tokens(merged_h: int, merged_w: int, rules: LayoutRules) -> int:
    """Tokens of one LLM frame ``H' x W'``: ``H' * (W' + 1)`` under the ``row_newline`` rule."""
    return merged_h * (merged_w + rules.row_newline)


def target_positions(start: int, grids: Sequence[Sequence[int]], merge_size: int = 1) -> np.ndarray:
    """Decode-time positions of images a model generates (GLM-Image), int64 ``[3, n + 1]``.

    The targets are generated last grid first. Target ``(1, h, w)`` (merged by ``merge_size``) starting
    at ``d`` gets ``t = d``, ``h = d + row``, ``w = d + col`` in raster order, then ``d += max(H', W')``;
    one end-marker token at ``d`` follows. ``start`` is the first position after the prompt.
    """
    merged = [merged_grid(g, merge_size, "generation target") for g in grids]
    total = sum(t * hh * ww for t, hh, ww in merged)
    if total > MAX_GENERATED_TOKENS:
        raise LayoutError(
            f"images to generate: {total:,} tokens for target grids {[tuple(int(v) for v in g) for g in grids]}; "
            f"at most {MAX_GENERATED_TOKENS:,} are supported"
        )
    parts: list[np.ndarray] = []
    d = int(start)
    for _, hh, ww in reversed(merged):
        block = np.empty((3, hh, ww), dtype=np.int64)
        block[0] = d
        block[1] = d + np.arange(hh, dtype=np.int64)[:, None]
        block[2] = d + np.arange(ww, dtype=np.int64)[None, :]
        parts.append(block.reshape(3, -1))
        d += max(hh, ww)
    parts.append(np.full((3, 1), d, dtype=np.int64))
    return np.concatenate(parts, axis=1)


def temporal_index(n_patches: int, rules: LayoutRules, second_per_grid: float) -> np.ndarray:
    """``tau(i)`` for ``i in [0, n_patches)``, int64.

    ``i`` under the index rule. Under the seconds rule the released arithmetic, in float32 as the model
    computes it from the float32 ``second_per_grid_ts`` its processor hands over (``spg32``), then
    truncated: ``trunc(fl32(fl32(i * spg32) * tps))`` (``seconds_grouping="(i*spg)*tps"``, the released
    Qwen2.5-VL code) or ``trunc(fl32(i * fl32(tps * spg32)))`` (``"i*(tps*spg)"``, transformers 5.x).
    A float64 product differs at common rates (fps 12.5, 25, 50, 100, 1.2, 2/0.7, 2/0.9).
    The timestamps rule splits a video into one-patch blocks, each with ``tau = 0``.
    """
    i = np.arange(n_patches, dtype=np.int64)
    if rules.temporal != "seconds":
        return i
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow to inf is refused below
        spg32 = np.float32(second_per_grid)
        tps32 = np.float32(rules.tokens_per_second)
        i32 = i.astype(np.float32)
        if rules.seconds_grouping == "i*(tps*spg)":
            t32 = i32 * (tps32 * spg32)
        else:
            t32 = (i32 * spg32) * tps32
    last = float(t32[-1]) if n_patches else 0.0
    if not last < MAX_POSITION:  # also catches inf / nan (float32 overflow)
        raise LayoutError(
            f"video time offsets overflow: {n_patches - 1} patches x second_per_grid {second_per_grid:g} s "
            f"x tokens_per_second {rules.tokens_per_second:g} = {last:g}, over {MAX_POSITION:.3g}"
        )
    return t32.astype(np.int64)


def _tokenize(tokenizer: Any, text: str) -> list[int]:
    out = encode_text(tokenizer, text)
    if not out:
        raise LayoutError(f"tokenizer returned no tokens for the timestamp {text!r}")
    return out


class _Plan:
    """Pieces of one sequence plus the grids the processors would report."""

    def __init__(self, rules: LayoutRules) -> None:
        self.rules = rules
        self.pieces: list[TextRun | Block] = []
        self.image_grids: list[tuple[int, int, int]] = []
        self.video_grids: list[tuple[int, int, int]] = []
        self.second_per_grid: list[float] = []
        self.notes: list[str] = []
        self.targets: list[tuple[int, int, int]] = []  # images the model will generate
        self.owners: list[int] = []  # index of the segment of each piece
        self.cache: dict[Segment, _SegmentPlan] | None = None  # this rules' segment plans (lazy)
        # which segments have cacheable plans: images and videos under the counter rule, but videos
        # under the timestamps rule (their plan holds tokenizer output)
        self.cache_images = rules.positions_base == "counter"
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
        plan is cached per rules and reused by every later occurrence (see :data:`_SEGMENT_PLAN_LIMIT`);
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
                    cache = self.cache = _segment_plans(self.rules)
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
            fused = _wrapped_block(pieces, rules.advance)
            if fused is not None:
                pieces = self.pieces[first:] = [fused]
        self.owners += [index] * len(pieces)
        if cacheable and len(self.notes) == notes and _small_plan(seg, pieces):
            _remember_plan(
                self.cache,  # type: ignore[arg-type]
                seg,
                _SegmentPlan(
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
        elif self.rules.positions_base == "canvas" and isinstance(seg, (Image, Video)):
            self._canvas(seg, index)
        elif isinstance(seg, Image):
            if seg.thumbnail_grid is not None:
                raise LayoutError(
                    f"image (segment {index}): a sliced picture (tiles with thumbnail_grid) needs the canvas "
                    f"rule; the {self.rules.name!r} rules have positions_base={self.rules.positions_base!r}"
                )
            self.image_grids.append(seg.grid)
            self.wrapped(index, seg.wrap, lambda: self._image(seg, index))
        elif isinstance(seg, Video) and seg.audio is None:
            self._video(seg, index, tokenizer)
        elif isinstance(seg, (Audio, Video)):
            what = "an Audio" if isinstance(seg, Audio) else "a Video with audio"
            raise LayoutError(
                f"segment {index} is {what}, but the {self.rules.name!r} rules have no audio; use an omni "
                "model such as 'qwen2.5-omni' or 'qwen3-omni'"
            )
        else:
            raise LayoutError(
                f"segment {index} is a {type(seg).__name__}; expected mrope.Text, mrope.Image or mrope.Video"
            )

    def _canvas(self, seg: Image | Video, index: int) -> None:
        """A picture or the frames of a video under the canvas rule (:mod:`mrope.canvas`): each frame is
        ``<image>`` thumbnail ``</image>``, then for a tiled image its rows of ``<slice>`` tile ``</slice>``
        joined by the newline token. Grids are reported per crop ``(1, h, w)``, in order, as the token
        interface takes them; positions are written by :func:`mrope.canvas.canvas_row` over the tokens."""
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
                if cols * rows > MAX_TILES:
                    raise LayoutError(
                        f"{kind} (segment {index}): {cols * rows} tiles; at most {MAX_TILES} are supported"
                    )
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

    def _image(self, img: Image, index: int) -> None:
        rules = self.rules
        merged = merged_grid(img.grid, rules.merge_size, f"image (segment {index})")
        tau = np.arange(merged[0], dtype=np.int64)
        if img.tiles is None:
            if rules.grid_border:  # placeholders too (type 1 for the processor), outside the grid
                self.text(1, rules.image_pad_id, "image", index)
            self.pieces.append(
                untiled_block(merged, tau, rules, "image", index, rules.image_pad_id, img.origin)
            )
            if rules.grid_border:
                self.text(1, rules.image_pad_id, "image", index)
            return
        if rules.row_newline or rules.grid_border or rules.positions_base != "counter":
            raise LayoutError(
                f"image (segment {index}): tiles are not supported under the {rules.name!r} rules "
                "(row_newline, grid_border or sequence positions)"
            )
        cols, rows = img.tiles
        _, hh, ww = merged
        if cols * rows > MAX_TILES:
            raise LayoutError(
                f"image (segment {index}): {cols * rows} tiles; at most {MAX_TILES} are supported"
            )
        if hh % rows or ww % cols:
            raise LayoutError(
                f"image (segment {index}): merged grid {hh}x{ww} (h x w) does not split into {rows} rows "
                f"and {cols} columns of equal tiles"
            )
        th, tw = hh // rows, ww // cols
        order = np.asarray(
            img.tile_order if img.tile_order is not None else range(rows * cols), dtype=np.int64
        )
        tile_rc = [(int(i) // cols, int(i) % cols) for i in order]
        if rules.tiles == "global":
            h0, w0 = _spatial_offset(hh, ww, rules, img.origin)
            self.pieces.append(
                Block(
                    tau,
                    th,
                    tw,
                    (order // cols) * th,
                    (order % cols) * tw,
                    h0,
                    w0,
                    hh,
                    ww,
                    "image",
                    index,
                    rules.image_pad_id,
                    tile_rc,
                    anchored=rules.spatial != "reset",
                )
            )
        else:
            for rc in tile_rc:
                block = untiled_block((1, th, tw), tau, rules, "image", index, rules.image_pad_id, img.origin)
                block.tiles = [rc]
                self.pieces.append(block)
        if img.thumbnail:
            self.pieces.append(untiled_block((1, th, tw), tau, rules, "thumbnail", index, rules.image_pad_id))

    def _video(self, vid: Video, index: int, tokenizer: Any) -> None:
        rules = self.rules
        if vid.tiles is not None:
            raise LayoutError(
                f"video (segment {index}): sliced frames (tiles, thumbnail_grid) need the canvas rule; the "
                f"{rules.name!r} rules have positions_base={rules.positions_base!r}"
            )
        if rules.positions_base != "counter":
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

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,
    ) -> Positions:
        """Write every piece into ``ids`` int64 ``[A, T]`` and ``tokens`` int64 ``[T]`` (new arrays when
        ``None``; a batch passes views of its own rows) and describe the result. ``image_index`` is the
        first image index of the ``sequence`` positions rule; ``total`` is :attr:`num_tokens` when the
        caller has it."""
        if total is None:
            total = self.num_tokens
        lay = self.rules
        if ids is None:
            ids = np.empty((lay.num_axes, total), dtype=np.int64)
        if tokens is None:
            tokens = np.empty(total, dtype=np.int64)
        spans: list[Span] = []
        if lay.positions_base == "sequence":
            top, _ = fill_sequence_pieces(self.pieces, ids, tokens, spans, image_index, self.owners)
        elif lay.positions_base == "canvas":
            fill_pieces(self.pieces, ids, tokens, spans, lay.advance, self.owners)  # token ids and spans
            ids[:] = canvas_positions(tokens, lay, self.image_grids, self.video_grids)
            top = int(ids.max()) if total else -1
        else:  # the counter rule: spans made from the pieces when first read
            top = fill_pieces(self.pieces, ids, tokens, None, lay.advance, self.owners)
            return _filled_positions(
                ids,
                0 if lay.generates_images else int(top + 1 - total),
                self.pieces,
                self.owners,
                tokens,
                _grid_array(self.image_grids),
                _grid_array(self.video_grids),
                np.asarray(self.second_per_grid, dtype=np.float64),
                lay,
                tuple(self.notes),
                target_positions(top + 1, self.targets, lay.merge_size)
                if lay.generates_images and self.targets
                else None,
            )
        generation = None
        if lay.generates_images and self.targets:
            generation = target_positions(top + 1, self.targets, lay.merge_size)
        return Positions(
            ids=ids,
            delta=0 if lay.generates_images else int(top + 1 - total),
            spans=tuple(spans),
            input_ids=tokens,
            image_grid_thw=_grid_array(self.image_grids),
            video_grid_thw=_grid_array(self.video_grids),
            second_per_grid_ts=np.asarray(self.second_per_grid, dtype=np.float64),
            rules=lay,
            notes=tuple(self.notes),
            generation_ids=generation,
        )


_GRID_ARRAYS: dict[tuple, np.ndarray] = {}  # read-only int64 [n, 3] per tuple of grids
_GRID_ARRAY_LIMIT = 1024
"""Most grid lists kept (each of at most :data:`_GRID_ARRAY_GRIDS` grids); when full the cache starts over."""
_GRID_ARRAY_GRIDS = 64


def _grid_array(grids: list[tuple[int, int, int]]) -> np.ndarray:
    """A new int64 ``[n, 3]`` of the grids (``[0, 3]`` for none). Prompts repeat the same grid lists, and
    copying a cached array costs a fifth of numpy's conversion of a list of tuples."""
    if not grids:
        return np.zeros((0, 3), dtype=np.int64)
    if len(grids) > _GRID_ARRAY_GRIDS:
        return np.array(grids, dtype=np.int64)
    key = tuple(grids)
    try:
        hit = _GRID_ARRAYS.get(key)
    except TypeError:  # a grid that is not a tuple of ints
        return np.array(grids, dtype=np.int64)
    if hit is None:
        hit = np.array(grids, dtype=np.int64)
        hit.flags.writeable = False
        if len(_GRID_ARRAYS) >= _GRID_ARRAY_LIMIT:
            _GRID_ARRAYS.clear()
        _GRID_ARRAYS[key] = hit
    return hit.copy()


class _SegmentPlan(NamedTuple):
    """What one image or video segment adds to a plan, wherever it stands (pieces are shared: never
    mutate them)."""

    pieces: tuple[TextRun | Block, ...]
    image_grids: tuple[tuple[int, int, int], ...]
    video_grids: tuple[tuple[int, int, int], ...]
    second_per_grid: tuple[float, ...]


_SEGMENT_PLANS: dict[LayoutRules, dict[Segment, _SegmentPlan]] = {}
_SEGMENT_PLAN_LIMIT = 4096
"""Most segment plans cached (all rules together); when full the cache starts over. Each holds at most
:data:`_PLAN_PIECES` pieces and :data:`_PLAN_FRAMES` temporal offsets, tiles, frame times and tile
orders together (a few KiB)."""
_PLAN_PIECES = 64
_PLAN_FRAMES = 1024
_segment_plan_count = 0
_last_plans: list = [None, None]  # the rules and plans of the latest lookup


def _segment_plans(rules: LayoutRules) -> dict[Segment, _SegmentPlan]:
    last_rules, last_plans = _last_plans
    if last_rules is rules:  # the same rules object as last time: skip hashing it (a microsecond)
        return last_plans
    plans = _SEGMENT_PLANS.get(rules)
    if plans is None:
        plans = _SEGMENT_PLANS[rules] = {}
    _last_plans[:] = [rules, plans]
    return plans


def _small_plan(seg: Segment, pieces: Sequence[TextRun | Block]) -> bool:
    """Whether a plan (and the segment, its key) is small enough to keep: the cache outlives requests."""
    if len(pieces) > _PLAN_PIECES:
        return False
    held = len(getattr(seg, "frame_times", None) or ()) + len(getattr(seg, "tile_order", None) or ())
    return held + sum(len(p.tau) + len(p.tile_h0) for p in pieces if type(p) is Block) <= _PLAN_FRAMES


def _remember_plan(plans: dict[Segment, _SegmentPlan], seg: Segment, plan: _SegmentPlan) -> None:
    global _segment_plan_count
    if _segment_plan_count >= _SEGMENT_PLAN_LIMIT:
        _SEGMENT_PLANS.clear()
        _last_plans[:] = [None, None]
        _segment_plan_count = 0
        plans.clear()  # the caller's dict may already be out of _SEGMENT_PLANS; keep it bounded too
    try:
        plans[seg] = plan
    except TypeError:  # a segment holding something unhashable is simply planned every time
        return
    _segment_plan_count += 1


_ARANGE = np.arange(1 << 16, dtype=np.int64)  # text positions below 2**16 are slices of this (512 KiB)
_ARANGE.flags.writeable = False
_TEMPLATES: dict[tuple, tuple] = {}  # (coordinates [3, n], two ints[, token ids [n] of a wrapped block])
_TEMPLATE_BUDGET = (
    1 << 21
)  # tokens kept in the cache (int64 [3, n] each, [4, n] when wrapped: 64 MiB at most)
_template_tokens = 0


def _block_template(p: Block) -> tuple:
    """The block's coordinates relative to its start, int64 ``[3, n]`` (rows tau, h, w), with the
    largest relative t and the largest relative h or w. Cached: prompts repeat the same grids, and
    one add into the output beats three broadcast writes.

    A wrapped block (``wrap`` set; always anchored) counts from its start wrapper on every axis: its
    columns are the start wrapper (0), the block (1 + the unwrapped template) and the end wrapper
    (where the advance rule puts the next text); the two numbers are then its largest relative
    position and the relative start of what follows.

    The cache alone holds the arrays (within :data:`_TEMPLATE_BUDGET`); a block keeps only its key, so
    blocks that outlive an eviction (the planners cache blocks) hold no memory of their own."""
    global _template_tokens
    key = p.template_key
    if key is None:
        key = p.template_key = (
            p.tau.tobytes(),
            p.tile_h,
            p.tile_w,
            p.tile_h0.tobytes(),
            p.tile_w0.tobytes(),
            p.h0,
            p.w0,
            p.follow_t,
            p.wrap is not None and (p.advance, p.wrap, p.token_id),
        )
    hit = _TEMPLATES.get(key)
    if hit is not None:
        return hit
    nt, frames, th, tw = len(p.tile_h0), len(p.tau), p.tile_h, p.tile_w
    template = np.empty((3, nt, frames, th, tw), dtype=np.int64)
    template[0] = p.tau[None, :, None, None]
    template[1] = p.h0 + p.tile_h0[:, None, None, None] + np.arange(th, dtype=np.int64)[None, None, :, None]
    template[2] = p.w0 + p.tile_w0[:, None, None, None] + np.arange(tw, dtype=np.int64)[None, None, None, :]
    if p.follow_t:
        template[1:] += p.tau[None, None, :, None, None]
    template = template.reshape(3, -1)
    top_t = int(p.tau.max())
    top_hw = max(p.h0 + int(p.tile_h0.max()) + th - 1, p.w0 + int(p.tile_w0.max()) + tw - 1)
    if p.follow_t:
        top_hw += top_t
    entry = (template, top_t, top_hw)
    if p.wrap is not None:  # start wrapper at 0, the block from 1, the end wrapper where text resumes
        end = 1 + (max(p.span_h, p.span_w) if p.advance == "spatial" else max(top_t, top_hw) + 1)
        wrapped = np.empty((4, template.shape[1] + 2), dtype=np.int64)  # row 3: the token ids
        wrapped[:3, 0] = 0
        np.add(template, 1, out=wrapped[:3, 1:-1])
        wrapped[:3, -1] = end
        wrapped[3] = p.token_id
        wrapped[3, 0], wrapped[3, -1] = p.wrap
        wrapped.flags.writeable = False
        entry = (wrapped[:3], max(end, 1 + top_t, 1 + top_hw), end + 1, wrapped[3])
    entry[0].flags.writeable = False
    n = entry[0].shape[1]
    if n <= _TEMPLATE_BUDGET // 4:
        if _template_tokens + n > _TEMPLATE_BUDGET:
            _TEMPLATES.clear()
            _template_tokens = 0
        _TEMPLATES[key] = entry
        _template_tokens += n
    return entry


def _wrapped_block(pieces: Sequence[TextRun | Block], advance: str) -> Block | None:
    """``[start wrapper, block, end wrapper]`` as one wrapped block (fewer pieces to plan and fill), when
    the block is anchored and untiled; else ``None``."""
    if len(pieces) != 3:
        return None
    start, block, end = pieces
    if (
        type(start) is not TextRun
        or type(end) is not TextRun
        or type(block) is not Block
        or start.kind != "wrapper"
        or end.kind != "wrapper"
        or start.n != 1
        or end.n != 1
        or type(start.token_ids) is not int
        or type(end.token_ids) is not int
        or not block.anchored
        or block.tiles is not None
        or block.wrap is not None
    ):
        return None
    return replace(block, wrap=(start.token_ids, end.token_ids), advance=advance)


def fill_pieces(
    pieces: Sequence[TextRun | Block],
    ids: np.ndarray,
    tokens: np.ndarray | None,
    spans: list[Span] | None,
    advance: str,
    owners: Sequence[int] | None = None,
) -> int:
    """Fill ``ids[:, :sum(n)]`` (and ``tokens`` / ``spans`` when given) from ``pieces``.

    ``owners`` holds the segment index of each piece (default: each piece's own ``index``); spans and
    errors name it. Consecutive text runs continue one another's positions, so each streak of them
    (text, then a vision wrapper, ...) is written with one slice of ``0, 1, 2, ...``.

    Returns the largest position written (-1 for an empty sequence).
    """
    if owners is None:
        owners = [p.index for p in pieces]
    a = 0  # token cursor
    offset = np.empty((3, 1), dtype=np.int64)  # scratch for _add_template (each call its own: threads)
    scalars = (np.empty((), dtype=np.int64), np.empty((), dtype=np.int64))
    top = -1  # max position so far
    s = 0  # start of the next piece
    streak = -1  # token where the pending streak of text runs began (-1: none)
    streak_s = 0  # its first position
    for p, owner in zip(pieces, owners, strict=True):
        n = p.n
        b = a + n
        if type(p) is TextRun:
            if s + n > MAX_POSITION:
                raise LayoutError(f"positions overflow: {p.kind} (segment {owner}) would reach {s + n - 1:,}")
            if streak < 0:
                streak, streak_s = a, s
            if tokens is not None:
                token = p.token_ids
                if n == 1:  # a wrapper token: a scalar write costs a seventh of a slice write
                    tokens[a] = token[0] if isinstance(token, (tuple, list)) else token
                else:
                    tokens[a:b] = token
            s = s + n
            if s > top:
                top = s - 1
            a = b
            continue
        if streak >= 0:
            _write_text(ids, streak, a, streak_s)
            streak = -1
        if p.wrap is not None:  # start wrapper, block, end wrapper: all counted from s
            entry = _TEMPLATES.get(p.template_key) if p.template_key is not None else None
            template, top_rel, next_rel, token_row = entry if entry is not None else _block_template(p)
            if s + top_rel > MAX_POSITION:
                raise LayoutError(
                    f"positions overflow: {p.kind} block (segment {owner}) would reach {s + top_rel:,}"
                )
            _add_template(template, s, s, offset, scalars, ids[:, a:b])
            if tokens is not None:
                tokens[a:b] = token_row
            if s + top_rel > top:
                top = s + top_rel
            s = s + next_rel
            a = b
            continue
        hw = s if p.anchored else 0
        entry = _TEMPLATES.get(p.template_key) if p.template_key is not None else None
        template, top_t, top_hw = entry if entry is not None else _block_template(p)
        if max(s + top_t, hw + top_hw) > MAX_POSITION:
            raise LayoutError(
                f"positions overflow: {p.kind} block (segment {owner}) would reach {max(s + top_t, hw + top_hw):,}"
            )
        _add_template(template, s, hw, offset, scalars, ids[:, a:b])
        if tokens is not None:
            tokens[a:b] = p.token_id
        top = max(top, s + top_t, hw + top_hw)
        s = s + max(p.span_h, p.span_w) if advance == "spatial" else top + 1
        a = b
    if streak >= 0:
        _write_text(ids, streak, a, streak_s)
    if spans is not None:
        spans += piece_spans(pieces, owners)
    return top


def piece_spans(pieces: Sequence[TextRun | Block], owners: Sequence[int]) -> list[Span]:
    """The spans of ``pieces`` laid end to end from token 0 (``owners``: each piece's segment index), as
    :func:`fill_pieces` places them: a text run is one span, a wrapped block its start wrapper, its
    block and its end wrapper, a tiled block one span per tile."""
    make_span = tuple.__new__  # Span(...) without the named tuple's Python-level __new__
    spans: list[Span] = []
    append = spans.append
    a = 0
    for p, owner in zip(pieces, owners, strict=True):
        b = a + p.n
        if type(p) is TextRun:
            append(make_span(Span, (p.kind, a, b, owner, None, None)))
        elif p.wrap is not None:
            append(make_span(Span, ("wrapper", a, a + 1, owner, None, None)))
            append(make_span(Span, (p.kind, a + 1, b - 1, owner, p.tile_grid, None)))
            append(make_span(Span, ("wrapper", b - 1, b, owner, None, None)))
        elif p.tiles is None:
            append(make_span(Span, (p.kind, a, b, owner, p.tile_grid, None)))
        else:
            per_tile = p.n // len(p.tiles)
            for k, rc in enumerate(p.tiles):
                start = a + k * per_tile
                append(make_span(Span, (p.kind, start, start + per_tile, owner, p.tile_grid, rc)))
        a = b
    return spans


_BUFFER_SIZE = np.getbufsize()


def _add_template(
    template: np.ndarray, t0: int, hw0: int, offset: np.ndarray, scalars: tuple, out: np.ndarray
) -> None:
    """``out = template + (t0, hw0, hw0)`` per row, for ``template`` and ``out`` ``[3, n]``.

    ``offset`` is an int64 ``[3, 1]`` and ``scalars`` two int64 0-d arrays, scratch space of the caller.
    One broadcast add for small and for very large blocks; row by row with 0-d offsets from 512 tokens
    while the block fits in one ufunc buffer: numpy (2.3+) copies such a strided 2-D add through its
    buffer, and there the three 1-D adds take 0.6-0.8x its time (measured at 1026 and 2050 tokens)."""
    n = template.shape[1]
    if n < 512 or 3 * n > _BUFFER_SIZE:
        offset[0, 0] = t0
        offset[1, 0] = offset[2, 0] = hw0
        np.add(template, offset, out=out)
    else:
        t_scalar, hw_scalar = scalars
        t_scalar[()] = t0
        hw_scalar[()] = hw0
        np.add(template[0], t_scalar, out=out[0])
        np.add(template[1], hw_scalar, out=out[1])
        np.add(template[2], hw_scalar, out=out[2])


def _write_text(ids: np.ndarray, a: int, b: int, s: int) -> None:
    """``ids[:, a:b] = s, s+1, ...`` on every axis (one token: a scalar write)."""
    if b - a == 1:
        ids[:, a] = s
    elif s + b - a <= _ARANGE.size:
        ids[:, a:b] = _ARANGE[s : s + b - a]
    else:
        ids[:, a:b] = np.arange(s, s + b - a, dtype=np.int64)


def canvas_positions(
    tokens: np.ndarray,
    rules: LayoutRules,
    image_grids: Sequence[Sequence[int]],
    video_grids: Sequence[Sequence[int]],
) -> np.ndarray:
    """Positions ``[3, T]`` of one sequence's tokens under the canvas rule, the crops' grids taken in order."""
    queues = {1: iter(image_grids), 2: iter(video_grids)}
    types = (tokens == rules.image_pad_id).astype(np.int64) + 2 * (tokens == rules.video_pad_id)

    def take(kind: int, at: int, count: int) -> tuple[int, int]:
        _, h, w = next(queues[kind])
        return h, w

    return canvas_row(tokens.tolist(), types.tolist(), take, rules)


def fill_sequence_pieces(
    pieces: Sequence[TextRun | Block],
    ids: np.ndarray,
    tokens: np.ndarray | None,
    spans: list[Span] | None,
    image_index: int = 0,
    owners: Sequence[int] | None = None,
) -> tuple[int, int]:
    """Fill ``ids[:, :sum(n)]`` under the ``sequence`` positions rule (HunyuanOCR).

    Every axis holds the token's index in the sequence; the tokens of a vision block write
    ``(col, row, image index)`` on the last three axes (``ids`` has 3 or 4 rows; with 4, row 0 stays the
    sequence index). Returns ``(largest position, next image index)``.
    """
    total = sum(p.n for p in pieces)
    if total > MAX_POSITION:
        raise LayoutError(f"positions overflow: {total:,} tokens")
    ids[:, :total] = np.arange(total, dtype=np.int64)
    top = total - 1
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


# --------------------------------------------------------------------------------------- public API


def build_positions(
    segments: Sequence[Segment],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
    convention: str = "released",
) -> Positions:
    """Positions of one sequence of segments.

    Args:
        segments: :class:`Text`, :class:`Image` and :class:`Video` values in sequence order.
        model: required (there is no default model): a family name (``"qwen2.5-vl"``, see
            :func:`mrope.models.names`), a Hugging Face model_type (``"qwen2_5_vl"``), a repo id
            (``"Qwen/Qwen2.5-VL-7B-Instruct"``), a :class:`mrope.models.ModelFamily`, or what
            :func:`mrope.from_pretrained` returns. May be omitted only when ``rules`` is a full
            :class:`LayoutRules`.
        rules: a :class:`LayoutRules` (replaces the model's) or a dict of overrides of the model's.
        tokenizer: a callable ``str -> list[int]`` or a ``tokenizers.Tokenizer``; needed for Qwen3-VL
            video timestamps (default: the tokenizer of a :func:`mrope.from_pretrained` checkpoint).
        convention: ``"released"`` (the official semantics) or ``"transformers5"`` (the family's own
            transformers 5.24 ``get_rope_index``: ``s + max(H', W')`` advance, its pad value).

    Returns:
        :class:`Positions` with ``ids`` int64 ``[3, T]``.
    """
    tokenizer = resolve_tokenizer(model, tokenizer)
    plan = _plan_sequence(segments, resolve_rules(model, rules, convention), tokenizer)
    for note in plan.notes:
        warnings.warn(note, MRopeWarning, stacklevel=2)
    return plan.positions()


def _plan_sequence(segments: Sequence[Segment], lay: LayoutRules, tokenizer: Any) -> _Plan:
    if isinstance(segments, (Text, Image, Video, Audio)) or not isinstance(segments, Sequence):
        raise LayoutError(
            f"segments must be a list of Text / Image / Video / Audio; got {type(segments).__name__}"
        )
    if lay.has_audio:  # the omni families' timeline (audio, time-aligned video)
        from mrope.timeline import OmniPlan

        return OmniPlan(segments, lay)  # type: ignore[return-value]
    plan = _Plan(lay)
    plan.extend(segments, tokenizer)
    return plan


def count_tokens(
    segments: Sequence[Segment],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
) -> int:
    """How many tokens :func:`build_positions` would emit, without writing any position.

    Uses the same planner, so it is exact; without a tokenizer each timestamp text counts as one token
    (a lower bound for Qwen3-VL / GLM-4.1V videos). Cheap for any grid size: use it to enforce caps
    before building. ``model`` is required, as in :func:`build_positions`.
    """
    tokenizer = resolve_tokenizer(model, tokenizer)
    lay = resolve_rules(model, rules)
    if lay.has_audio:
        from mrope.timeline import count_omni_tokens

        return count_omni_tokens(segments, lay)
    total = 0
    for i, seg in enumerate(segments):
        if isinstance(seg, Video) and lay.positions_base == "canvas" and seg.audio is None and seg.wrap:
            # arithmetic, so a clip of any length costs the same: <image> thumbnail </image> per frame
            t, hh, ww = merged_grid(seg.grid, lay.merge_size, f"video (segment {i})")
            if seg.tiles is None:
                total += t * (hh * ww + 2)
            else:
                cols, rows = seg.tiles
                _, th, tw = merged_grid(seg.thumbnail_grid, lay.merge_size, f"video (segment {i})")
                total += t * (th * tw + 2 + hh * ww + 2 * cols * rows + rows - 1)
            continue
        if (
            isinstance(seg, Video)
            and seg.audio is None  # audio needs audio rules: the planner says so
            and lay.positions_base != "canvas"
            and not (lay.temporal == "timestamps" and seg.wrap and tokenizer is not None)
        ):
            # arithmetic, so a video of any length costs the same
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
        plan = _Plan(lay)
        plan.add(seg, i, tokenizer if tokenizer is not None else _one_token)
        total += sum(p.n for p in plan.pieces)
    return total


def _one_token(text: str) -> list[int]:
    return [0]


def build_batch(
    samples: Sequence[Sequence[Segment]],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    padding_side: str = "left",
    pad_position: int | None = None,
    pad_token_id: int = 0,
    tokenizer: Any = None,
    convention: str = "released",
) -> Batch:
    """Positions of a batch of sequences, padded to the longest.

    Positions are computed on valid tokens only, so left and right padding give the same values at
    valid tokens. Pad slots hold ``pad_position`` (default: the rules' ``pad_position``, the family's
    value under ``convention``) and ``attention_mask`` is 0 there. ``model`` is required, as in
    :func:`build_positions`.

    Returns:
        :class:`Batch` with ``ids`` int64 ``[3, B, L]``, ``attention_mask`` ``[B, L]``, ``deltas`` ``[B]``.
    """
    if padding_side not in ("left", "right"):
        raise LayoutError(f"padding_side must be 'left' or 'right'; got {padding_side!r}")
    tokenizer = resolve_tokenizer(model, tokenizer)
    lay = resolve_rules(model, rules, convention)
    if pad_position is None:
        pad_position = lay.pad_position
    if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence) or not samples:
        raise LayoutError("build_batch takes a non-empty list of segment lists")
    plans = [_plan_sequence(s, lay, tokenizer) for s in samples]
    lengths = [plan.num_tokens for plan in plans]
    width = max(lengths)
    b = len(plans)
    # every sequence is filled straight into its row (no per-sequence arrays to copy); only the pad
    # slots are written besides, so each byte of the batch is touched once
    ids = np.empty((lay.num_axes, b, width), dtype=np.float32 if lay.fractional_time else np.int64)
    mask = np.ones((b, width), dtype=np.int64)
    input_ids = np.empty((b, width), dtype=np.int64)
    seqs = []
    image_index = 0
    for row, (plan, n) in enumerate(zip(plans, lengths, strict=True)):
        sl, pad = (
            (slice(width - n, width), slice(0, width - n))
            if padding_side == "left"
            else (
                slice(0, n),
                slice(n, width),
            )
        )
        if n < width:
            ids[:, row, pad] = pad_position
            input_ids[row, pad] = pad_token_id
            mask[row, pad] = 0
        for note in plan.notes:
            warnings.warn(f"sample {row}: {note}", MRopeWarning, stacklevel=2)
        seqs.append(plan.positions(ids[:, row, sl], input_ids[row, sl], image_index, n))
        if lay.image_index_scope == "batch":  # the image index keeps counting across the rows
            image_index += len(plan.image_grids) - len(plan.targets)
    deltas = np.asarray([p.delta for p in seqs], dtype=ids.dtype)
    return Batch(ids=ids, attention_mask=mask, deltas=deltas, input_ids=input_ids, sequences=tuple(seqs))


def next_positions(delta: int | np.ndarray | Sequence[int], n_done: int, n_new: int) -> np.ndarray:
    """Positions of ``n_new`` tokens that follow ``n_done`` valid tokens (decode, or prefill chunks past
    the prompt): token ``i`` gets ``i + delta`` on every axis.

    Args:
        delta: the sequence's delta (an int), or one per sequence (``[B]``); a float delta (Qwen3-Omni's
            fractional positions) gives float32 positions ``fl32(i + delta)``.
        n_done: valid tokens already in the cache (prompt included), counted without padding.
        n_new: tokens to place.

    Returns:
        int64 ``[3, n_new]`` for an int delta, ``[3, B, n_new]`` for ``[B]`` deltas.
    """
    for name, v in (("n_done", n_done), ("n_new", n_new)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise LayoutError(f"{name} must be an int >= 0; got {v!r}")
    steps = np.arange(n_done, n_done + n_new, dtype=np.int64)
    d = np.asarray(delta)
    if d.dtype.kind == "f" and d.ndim <= 1 and d.size and np.all(np.isfinite(d)):
        # fractional-time families (Qwen3-Omni): float32 i + delta, as the model adds them
        d32, s32 = d.astype(np.float32), steps.astype(np.float32)
        if d.ndim == 0:
            return np.broadcast_to(s32 + d32, (3, n_new)).copy()
        return np.broadcast_to(s32[None, :] + d32[:, None], (3, d.size, n_new)).copy()
    if d.dtype.kind not in "iu" or d.ndim > 1 or (d.ndim == 1 and d.size == 0):
        raise LayoutError(f"delta must be an int or a 1-D int array [B]; got {delta!r}")
    if d.ndim == 0:
        return np.broadcast_to(steps + int(d), (3, n_new)).copy()
    return np.broadcast_to(steps[None, :] + d.astype(np.int64)[:, None], (3, d.size, n_new)).copy()


def text_positions(n: int) -> np.ndarray:
    """``0 .. n-1`` on every axis, int64 ``[3, n]`` (what M-RoPE sees for text only)."""
    if n < 0:
        raise LayoutError(f"n must be >= 0; got {n}")
    return np.broadcast_to(np.arange(n, dtype=np.int64), (3, n)).copy()


__all__ = [
    "Batch",
    "MRopeWarning",
    "Positions",
    "Span",
    "build_batch",
    "build_positions",
    "count_tokens",
    "frame_tokens",
    "merged_grid",
    "span_token_types",
    "next_positions",
    "target_positions",
    "temporal_index",
    "text_positions",
]
