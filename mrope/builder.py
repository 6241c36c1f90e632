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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mrope.errors import LayoutError
from mrope.rules import LayoutRules, resolve_rules
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

DEFAULT_PAD_POSITION = 1
"""Position value of pad slots in batches (the official Qwen code and transformers 4.x use 1;
transformers 5.x uses 0: pass ``pad_position=0`` to match it)."""


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
        audio_tokens: int64 ``[n_audios]``: tokens of each audio clip in order (standalone and inside
            videos), for rules with audio.

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

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[1])

    def torch(self) -> torch.Tensor:
        """``ids`` as a torch tensor ``[3, T]`` (int64, or float32 for fractional time; shares memory)."""
        import torch

        return torch.from_numpy(self.ids)

    def metadata(self) -> dict[str, Any]:
        """Everything but the ids, JSON-ready: delta, num_tokens, spans, the grids, second_per_grid_ts,
        notes (the fields of the service's positions response besides ``positions``)."""
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
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"positions": [[t...], [h...], [w...]], **metadata()}``."""
        return {"positions": self.ids.tolist(), **self.metadata()}

    def window(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[3, stop - start]`` of tokens ``start .. stop-1`` of a sequence that begins with
        this prompt: the prompt's own positions where they exist, decode continuation past its end.

        This is how chunked prefill and decode stay in one coordinate system: slice, never rebuild.
        """
        if not (0 <= start <= stop):
            raise LayoutError(f"window needs 0 <= start <= stop; got start={start}, stop={stop}")
        t = self.num_tokens
        inside = self.ids[:, start : min(stop, t)]
        if stop <= t:
            return inside.copy()
        first = max(start, t)
        return np.concatenate([inside, next_positions(self.delta, first, stop - first)], axis=1)


@dataclass(frozen=True, eq=False)
class Batch:
    """Positions of a padded batch.

    Attributes:
        ids: int64 ``[3, B, L]``; pad slots hold ``pad_position``.
        attention_mask: int64 ``[B, L]``, 1 at valid tokens.
        deltas: int64 ``[B]``.
        input_ids: int64 ``[B, L]`` (pad slots hold ``pad_token_id``).
        sequences: the per-sample :class:`Positions`; their ``ids`` and ``input_ids`` are views of this
            batch's rows (they share memory with ``ids`` and ``input_ids``).
    """

    ids: np.ndarray
    attention_mask: np.ndarray
    deltas: np.ndarray
    input_ids: np.ndarray
    sequences: tuple[Positions, ...]

    def torch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(position_ids [3, B, L], attention_mask [B, L], deltas [B, 1])`` as torch tensors."""
        import torch

        return (
            torch.from_numpy(self.ids),
            torch.from_numpy(self.attention_mask),
            torch.from_numpy(self.deltas).unsqueeze(1),
        )


# ----------------------------------------------------------------------------------------- pieces


@dataclass
class _Text:
    n: int
    token_ids: Sequence[int] | int
    kind: str
    index: int


@dataclass
class _Block:
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
    n: int = field(init=False)  # tokens in the block
    template: tuple[np.ndarray, int, int] | None = field(init=False, default=None)  # _block_template

    def __post_init__(self) -> None:
        self.n = len(self.tau) * self.tile_h * self.tile_w * len(self.tile_h0)


def _untiled_block(
    merged: tuple[int, int, int],
    tau: np.ndarray,
    rules: LayoutRules,
    kind: str,
    index: int,
    token_id: int,
    origin: tuple[int, int] = (0, 0),
) -> _Block:
    _, hh, ww = merged
    h0, w0 = _spatial_offset(hh, ww, rules, origin)
    return _Block(
        tau, hh, ww, _ZERO, _ZERO, h0, w0, hh, ww, kind, index, token_id, anchored=rules.spatial != "reset"
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


def merged_grid(grid: Sequence[int], merge_size: int, what: str = "vision") -> tuple[int, int, int]:
    """Encoder grid ``(t, h, w)`` -> LLM grid ``(t, h / m, w / m)``; h and w must divide by ``m``."""
    t, h, w = (int(v) for v in grid)
    if min(t, h, w) < 1:
        raise LayoutError(f"{what} grid must be positive (t, h, w); got {tuple(grid)}")
    if h % merge_size or w % merge_size:
        raise LayoutError(
            f"{what} grid {(t, h, w)}: h and w must be multiples of the merge size {merge_size}"
        )
    return t, h // merge_size, w // merge_size


def temporal_index(n_patches: int, rules: LayoutRules, second_per_grid: float) -> np.ndarray:
    """``tau(i)`` for ``i in [0, n_patches)``, int64: ``i`` (index rule), or
    ``floor(i * second_per_grid * tokens_per_second)`` (seconds rule; multiply first, then floor).
    The timestamps rule splits a video into one-patch blocks, each with ``tau = 0``."""
    i = np.arange(n_patches, dtype=np.int64)
    if rules.temporal == "seconds":
        last = (n_patches - 1) * float(second_per_grid) * float(rules.tokens_per_second)
        if not last < MAX_POSITION:
            raise LayoutError(
                f"video time offsets overflow: {n_patches - 1} patches x second_per_grid {second_per_grid:g} s "
                f"x tokens_per_second {rules.tokens_per_second:g} = {last:g}, over {MAX_POSITION:.3g}"
            )
        return np.floor(i * float(second_per_grid) * float(rules.tokens_per_second)).astype(np.int64)
    return i


def _tokenize(tokenizer: Any, text: str) -> list[int]:
    out = encode_text(tokenizer, text)
    if not out:
        raise LayoutError(f"tokenizer returned no tokens for the timestamp {text!r}")
    return out


class _Plan:
    """Pieces of one sequence plus the grids the processors would report."""

    def __init__(self, rules: LayoutRules) -> None:
        self.rules = rules
        self.pieces: list[_Text | _Block] = []
        self.image_grids: list[tuple[int, int, int]] = []
        self.video_grids: list[tuple[int, int, int]] = []
        self.second_per_grid: list[float] = []
        self.notes: list[str] = []

    def text(self, n: int, token_ids: Sequence[int] | int, kind: str, index: int) -> None:
        if n:
            self.pieces.append(_Text(n, token_ids, kind, index))

    def wrapped(self, index: int, wrap: bool, body: Callable[[], None]) -> None:
        if wrap:
            self.text(1, self.rules.vision_start_id, "wrapper", index)
        body()
        if wrap:
            self.text(1, self.rules.vision_end_id, "wrapper", index)

    def add(self, seg: Segment, index: int, tokenizer: Any) -> None:
        if isinstance(seg, Text):
            ids = seg.token_ids if seg.token_ids is not None else TEXT_FILL_ID
            self.text(seg.num_tokens, ids, "text", index)
        elif isinstance(seg, Image):
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

    def _image(self, img: Image, index: int) -> None:
        rules = self.rules
        merged = merged_grid(img.grid, rules.merge_size, f"image (segment {index})")
        tau = np.arange(merged[0], dtype=np.int64)
        if img.tiles is None:
            self.pieces.append(
                _untiled_block(merged, tau, rules, "image", index, rules.image_pad_id, img.origin)
            )
            return
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
                _Block(
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
                block = _untiled_block(
                    (1, th, tw), tau, rules, "image", index, rules.image_pad_id, img.origin
                )
                block.tiles = [rc]
                self.pieces.append(block)
        if img.thumbnail:
            self.pieces.append(
                _untiled_block((1, th, tw), tau, rules, "thumbnail", index, rules.image_pad_id)
            )

    def _video(self, vid: Video, index: int, tokenizer: Any) -> None:
        rules = self.rules
        merged = merged_grid(vid.grid, rules.merge_size, f"video (segment {index})")
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
            self.wrapped(
                index,
                vid.wrap,
                lambda: self.pieces.append(
                    _untiled_block(merged, tau, rules, "video", index, rules.video_pad_id)
                ),
            )
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
                    _untiled_block(frame, zero_tau, rules, "video", index, rules.video_pad_id)
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

    def positions(self, ids: np.ndarray | None = None, tokens: np.ndarray | None = None) -> Positions:
        """Write every piece into ``ids`` int64 ``[3, T]`` and ``tokens`` int64 ``[T]`` (new arrays when
        ``None``; a batch passes views of its own rows) and describe the result."""
        total = self.num_tokens
        if ids is None:
            ids = np.empty((3, total), dtype=np.int64)
        if tokens is None:
            tokens = np.empty(total, dtype=np.int64)
        spans: list[Span] = []
        top = fill_pieces(self.pieces, ids, tokens, spans, self.rules.advance)
        return Positions(
            ids=ids,
            delta=int(top + 1 - total),
            spans=tuple(spans),
            input_ids=tokens,
            image_grid_thw=np.asarray(self.image_grids, dtype=np.int64).reshape(-1, 3),
            video_grid_thw=np.asarray(self.video_grids, dtype=np.int64).reshape(-1, 3),
            second_per_grid_ts=np.asarray(self.second_per_grid, dtype=np.float64),
            rules=self.rules,
            notes=tuple(self.notes),
        )


_ARANGE = np.arange(1 << 16, dtype=np.int64)  # text positions below 2**16 are slices of this (512 KiB)
_ARANGE.flags.writeable = False
_TEMPLATES: dict[tuple, tuple[np.ndarray, int, int]] = {}
_TEMPLATE_BUDGET = 1 << 21  # tokens kept in the cache (int64 [3, n] each: 48 MiB at most)
_template_tokens = 0


def _block_template(p: _Block) -> tuple[np.ndarray, int, int]:
    """The block's coordinates relative to its start, int64 ``[3, n]`` (rows tau, h, w), with the
    largest relative t and the largest relative h or w. Cached: prompts repeat the same grids, and
    one add into the output beats three broadcast writes."""
    global _template_tokens
    key = (p.tau.tobytes(), p.tile_h, p.tile_w, p.tile_h0.tobytes(), p.tile_w0.tobytes(), p.h0, p.w0)
    hit = _TEMPLATES.get(key)
    if hit is not None:
        return hit
    nt, frames, th, tw = len(p.tile_h0), len(p.tau), p.tile_h, p.tile_w
    template = np.empty((3, nt, frames, th, tw), dtype=np.int64)
    template[0] = p.tau[None, :, None, None]
    template[1] = p.h0 + p.tile_h0[:, None, None, None] + np.arange(th, dtype=np.int64)[None, None, :, None]
    template[2] = p.w0 + p.tile_w0[:, None, None, None] + np.arange(tw, dtype=np.int64)[None, None, None, :]
    template = template.reshape(3, -1)
    template.flags.writeable = False
    top_t = int(p.tau.max())
    top_hw = max(p.h0 + int(p.tile_h0.max()) + th - 1, p.w0 + int(p.tile_w0.max()) + tw - 1)
    entry = (template, top_t, top_hw)
    n = template.shape[1]
    if n <= _TEMPLATE_BUDGET // 4:
        if _template_tokens + n > _TEMPLATE_BUDGET:
            _TEMPLATES.clear()
            _template_tokens = 0
        _TEMPLATES[key] = entry
        _template_tokens += n
    return entry


def fill_pieces(
    pieces: Sequence[_Text | _Block],
    ids: np.ndarray,
    tokens: np.ndarray | None,
    spans: list[Span] | None,
    advance: str,
) -> int:
    """Fill ``ids[:, :sum(n)]`` (and ``tokens`` / ``spans`` when given) from ``pieces``.

    Returns the largest position written (-1 for an empty sequence).
    """
    a = 0  # token cursor
    offset = np.empty((3, 1), dtype=np.int64)
    top = -1  # max position so far
    s = 0  # start of the next piece
    for p in pieces:
        n = p.n
        b = a + n
        if isinstance(p, _Text):
            if s + n > MAX_POSITION:
                raise LayoutError(
                    f"positions overflow: {p.kind} (segment {p.index}) would reach {s + n - 1:,}"
                )
            if n == 1:  # a wrapper token: scalar writes cost a third of slice writes
                ids[:, a] = s
                if tokens is not None:
                    tokens[a] = p.token_ids[0] if isinstance(p.token_ids, (tuple, list)) else p.token_ids
            else:
                ids[:, a:b] = (
                    _ARANGE[s : s + n] if s + n <= _ARANGE.size else np.arange(s, s + n, dtype=np.int64)
                )
                if tokens is not None:
                    tokens[a:b] = p.token_ids
            if spans is not None:
                spans.append(Span(p.kind, a, b, p.index))
            top = max(top, s + n - 1)
            s = s + n
            a = b
            continue
        hw = s if p.anchored else 0
        entry = p.template or _block_template(p)
        if p.template is None and p.n <= _TEMPLATE_BUDGET // 4:  # reused blocks keep a small template
            p.template = entry
        template, top_t, top_hw = entry
        if max(s + top_t, hw + top_hw) > MAX_POSITION:
            raise LayoutError(
                f"positions overflow: {p.kind} block (segment {p.index}) would reach {max(s + top_t, hw + top_hw):,}"
            )
        offset[0, 0] = s
        offset[1, 0] = offset[2, 0] = hw
        np.add(template, offset, out=ids[:, a:b])
        if tokens is not None:
            tokens[a:b] = p.token_id
        if spans is not None:
            frames, th, tw = len(p.tau), p.tile_h, p.tile_w
            per_tile = frames * th * tw
            if p.tiles is None:
                spans.append(Span(p.kind, a, b, p.index, (frames, th, tw)))
            else:
                for k, rc in enumerate(p.tiles):
                    spans.append(
                        Span(p.kind, a + k * per_tile, a + (k + 1) * per_tile, p.index, (frames, th, tw), rc)
                    )
        top = max(top, s + top_t, hw + top_hw)
        s = s + max(p.span_h, p.span_w) if advance == "spatial" else top + 1
        a = b
    return top


# --------------------------------------------------------------------------------------- public API


def build_positions(
    segments: Sequence[Segment],
    model: str = "qwen2-vl",
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
) -> Positions:
    """Positions of one sequence of segments.

    Args:
        segments: :class:`Text`, :class:`Image` and :class:`Video` values in sequence order.
        model: a preset name (``qwen2-vl``, ``qwen2.5-vl``, ``qwen3-vl``, ``glm-4.1v``).
        rules: a :class:`LayoutRules` (replaces the preset) or a dict of overrides of the preset.
        tokenizer: a callable ``str -> list[int]`` or a ``tokenizers.Tokenizer``; needed for Qwen3-VL
            video timestamps.

    Returns:
        :class:`Positions` with ``ids`` int64 ``[3, T]``.
    """
    plan = _plan_sequence(segments, resolve_rules(model, rules), tokenizer)
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
    for i, seg in enumerate(segments):
        plan.add(seg, i, tokenizer)
    return plan


def count_tokens(
    segments: Sequence[Segment],
    model: str = "qwen2-vl",
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
) -> int:
    """How many tokens :func:`build_positions` would emit, without writing any position.

    Uses the same planner, so it is exact; without a tokenizer each timestamp text counts as one token
    (a lower bound for Qwen3-VL / GLM-4.1V videos). Cheap for any grid size: use it to enforce caps
    before building.
    """
    lay = resolve_rules(model, rules)
    if lay.has_audio:
        from mrope.timeline import count_omni_tokens

        return count_omni_tokens(segments, lay)
    total = 0
    for i, seg in enumerate(segments):
        if isinstance(seg, Video) and not (
            lay.temporal == "timestamps" and seg.wrap and tokenizer is not None
        ):
            # arithmetic, so a video of any length costs the same
            t, hh, ww = merged_grid(seg.grid, lay.merge_size, f"video (segment {i})")
            if lay.temporal != "timestamps":
                total += t * hh * ww + 2 * seg.wrap
            else:
                outer = seg.wrap and lay.video_start_id is not None
                total += t * (hh * ww + 3 * seg.wrap) + outer + (outer and lay.video_end_id is not None)
            continue
        plan = _Plan(lay)
        plan.add(seg, i, tokenizer if tokenizer is not None else _one_token)
        total += sum(p.n for p in plan.pieces)
    return total


def _one_token(text: str) -> list[int]:
    return [0]


def build_batch(
    samples: Sequence[Sequence[Segment]],
    model: str = "qwen2-vl",
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    padding_side: str = "left",
    pad_position: int = DEFAULT_PAD_POSITION,
    pad_token_id: int = 0,
    tokenizer: Any = None,
) -> Batch:
    """Positions of a batch of sequences, padded to the longest.

    Positions are computed on valid tokens only, so left and right padding give the same values at
    valid tokens. Pad slots hold ``pad_position`` and ``attention_mask`` is 0 there.

    Returns:
        :class:`Batch` with ``ids`` int64 ``[3, B, L]``, ``attention_mask`` ``[B, L]``, ``deltas`` ``[B]``.
    """
    if padding_side not in ("left", "right"):
        raise LayoutError(f"padding_side must be 'left' or 'right'; got {padding_side!r}")
    lay = resolve_rules(model, rules)
    if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence) or not samples:
        raise LayoutError("build_batch takes a non-empty list of segment lists")
    plans = [_plan_sequence(s, lay, tokenizer) for s in samples]
    lengths = [plan.num_tokens for plan in plans]
    width = max(lengths)
    b = len(plans)
    # every sequence is filled straight into its row (no per-sequence arrays to copy); only the pad
    # slots are written besides, so each byte of the batch is touched once
    ids = np.empty((3, b, width), dtype=np.float32 if lay.fractional_time else np.int64)
    mask = np.zeros((b, width), dtype=np.int64)
    input_ids = np.empty((b, width), dtype=np.int64)
    seqs = []
    for row, (plan, n) in enumerate(zip(plans, lengths, strict=True)):
        sl, pad = (
            (slice(width - n, width), slice(0, width - n))
            if padding_side == "left"
            else (
                slice(0, n),
                slice(n, width),
            )
        )
        ids[:, row, pad] = pad_position
        input_ids[row, pad] = pad_token_id
        mask[row, sl] = 1
        for note in plan.notes:
            warnings.warn(f"sample {row}: {note}", MRopeWarning, stacklevel=2)
        seqs.append(plan.positions(ids[:, row, sl], input_ids[row, sl]))
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
    "merged_grid",
    "next_positions",
    "temporal_index",
    "text_positions",
]
