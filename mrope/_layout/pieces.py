"""The pieces every layout engine plans into (text runs, vision blocks) and the fill engine that writes them.

Planning turns segments (or, in the token-id scan, placeholder runs) into a flat list of pieces: text
runs and vision blocks, each with its size. Filling writes every piece into one preallocated ``[A, T]``
int64 array (``A = 3``; 4 under VRoPE's ``"symmetric"`` spatial rule) with broadcast assignments, so the
cost is a few numpy calls per piece and nothing per token.
The coordinates of a block relative to its start are cached templates, one add away from the output.

Counter rule (transformers 5.24 models/qwen2_vl/modeling_qwen2_vl.py:895, ``get_rope_index``): each piece
starts at ``s = 1 + max(all positions so far)`` (0 at the start); a text run of n tokens gets
``s .. s+n-1`` on every axis; a vision block of LLM grid ``(T', H', W')`` gets
``(s + tau(i), s + h0 + j, s + w0 + k)`` for its token ``(i, j, k)``. Under the ``"symmetric"`` spatial
rule a block's four rows are its grid and the grid's three mirror images (:func:`symmetric_template`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from mrope._caches import register
from mrope._errors import LayoutError
from mrope._grid import MAX_POSITION, ceil32
from mrope._layout.circle import check_one_frame, circle_template
from mrope._positions import Span
from mrope._rules import LayoutRules

ZERO_OFFSETS = np.zeros(1, dtype=np.int64)
"""Read-only int64 ``[1]`` holding 0: the offsets of an untiled block's one tile, and the time offset
of a one-frame block."""
ZERO_OFFSETS.flags.writeable = False


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

    tau: np.ndarray  # int64 [T'] (float64 under a fractional temporal_stride)
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
    symmetric: bool = False  # four rows: the grid and its mirror images (the "symmetric" spatial rule)
    token_time: bool = False  # every axis (m + f) / 2 for token m in frame f (spatial="token_time")
    wrap: tuple[int, int] | None = None  # (start id, end id): one wrapper token before and after
    advance: str = "max+1"  # the advance rule, which places the end wrapper of a wrapped block
    step: float | None = None  # the spatial="sequential" rule's step: token k (from 1) at s - 1 + k * step
    gather: np.ndarray | None = None  # tiles="thumbnail": the token of the block's template each takes
    circle: tuple[float, float] | None = None  # (radius, alpha) of the circle rule (mrope._layout.circle)
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
    """One block of LLM grid ``merged`` (time offsets ``tau``) under the rules' ``row_newline``,
    ``spatial`` (centred, reset, sequential), ``crop`` (``origin``) and ``frame_block`` rules."""
    _, hh, ww = merged
    cols = ww + rules.row_newline  # the row_newline rule: one more token, at column W', ends every row
    h0, w0 = (0, 0) if rules.spatial == "circle" else spatial_offset(hh, cols, rules, origin)
    follow_t = rules.frame_block and len(tau) > 1
    if follow_t:  # the frame_block rule: frame f starts a block of side max(H', columns)
        tau = np.arange(len(tau), dtype=np.int64) * max(hh, cols)
    follow_t = follow_t or rules.spatial == "diagonal"  # each frame centred on its own t
    symmetric = rules.spatial == "symmetric"
    if symmetric:  # VRoPE: frame f starts f (H' + W' - 1) on, one past the last frame's largest position
        tau = np.arange(len(tau), dtype=np.int64) * (hh + cols - 1)
    circle = (float(rules.circle_radius), float(rules.circle_alpha)) if rules.spatial == "circle" else None
    if circle is not None:
        check_one_frame(len(tau))
    return Block(
        tau,
        hh,
        cols,
        ZERO_OFFSETS,
        ZERO_OFFSETS,
        h0,
        w0,
        hh,
        cols,
        kind,
        index,
        token_id,
        anchored=rules.spatial != "reset",
        follow_t=follow_t,
        symmetric=symmetric,
        token_time=rules.spatial == "token_time",
        step=sequential_step(rules),  # V2PE: one line of steps (the grid's shape and offsets unused)
        circle=circle,
    )


def sequential_step(rules: LayoutRules) -> float | None:
    """The step of a vision token under ``spatial="sequential"`` (``rules.vision_step``), else ``None``."""
    return rules.vision_step if rules.spatial == "sequential" else None


def spatial_offset(hh: int, ww: int, rules: LayoutRules, origin: tuple[int, int]) -> tuple[int, int]:
    """The ``(h0, w0)`` of a block of ``hh x ww`` merged tokens: its first row and column relative to
    where h and w start (``spatial``), shifted by a kept crop ``origin``."""
    h0 = w0 = 0
    if rules.spatial == "circle":  # untiled blocks take the circle's own coordinates (centred: no origin)
        raise LayoutError(
            "the circle rule (Circle-RoPE) maps an untiled grid; an image in tiles laid out as one block "
            "(tiles='global') has no circle layout: use tiles='independent' (a circle per tile)"
        )
    if rules.spatial == "centered":
        side = max(hh, ww)
        h0, w0 = (side - hh) // 2, (side - ww) // 2
    elif rules.spatial == "diagonal":  # VideoRoPE: h = t + j - (H' - 1) // 2 (follow_t adds t)
        h0, w0 = -((hh - 1) // 2), -((ww - 1) // 2)
    if rules.crop == "keep":
        h0, w0 = h0 + origin[0], w0 + origin[1]
    return h0, w0


_ARANGE = np.arange(1 << 16, dtype=np.int64)  # text positions below 2**16 are slices of this (512 KiB)
_ARANGE.flags.writeable = False
_TEMPLATES: dict[tuple, tuple] = {}  # (coordinates [A, n], two ints[, token ids [n] of a wrapped block])
_TEMPLATE_BUDGET = (
    1 << 21
)  # tokens kept in the cache (int64 [3, n] each, [4, n] when wrapped: 64 MiB at most; VRoPE's [5, n]: 80)
_template_tokens = 0


def _clear_templates() -> None:
    global _template_tokens
    _TEMPLATES.clear()
    _template_tokens = 0


# sized in tokens (columns of the cached coordinates), the unit of _TEMPLATE_BUDGET
register("layout.block_templates", _clear_templates, lambda: _template_tokens, _TEMPLATE_BUDGET)


def block_template(p: Block) -> tuple:
    """The block's coordinates relative to its start, int64 ``[A, n]`` (rows tau, h, w; the four rows of
    :func:`symmetric_template` for a symmetric block), with the largest relative t and the largest
    relative h or w (of any row). Cached: prompts repeat the same grids, and
    one add into the output beats three broadcast writes.

    A wrapped block (``wrap`` set; always anchored) counts from its start wrapper on every axis: its
    columns are the start wrapper (0), the block (1 + the unwrapped template) and the end wrapper
    (where the advance rule puts the next text); the two numbers are then its largest relative
    position and the relative start of what follows.

    The cache alone holds the arrays (within :data:`_TEMPLATE_BUDGET`); a block keeps only its key, so
    blocks that outlive an eviction (the planners cache blocks) hold no memory of their own."""
    key = p.template_key
    if key is None:
        key = p.template_key = (
            p.tau.dtype.char,
            p.tau.tobytes(),
            p.tile_h,
            p.tile_w,
            p.tile_h0.tobytes(),
            p.tile_w0.tobytes(),
            p.h0,
            p.w0,
            p.follow_t,
            p.symmetric,
            p.token_time,
            p.wrap is not None and (p.advance, p.wrap, p.token_id),
            p.step,
            None if p.gather is None else p.gather.tobytes(),
            p.circle,
        )
    hit = _TEMPLATES.get(key)
    if hit is not None:
        return hit
    if p.gather is not None:  # a tile of tiles="thumbnail": the thumbnail's positions, gathered
        template = block_template(replace(p, gather=None, kind="thumbnail", tiles=None))[0][:, p.gather]
        return _cache_template(key, (template, template[0].max().item(), template[1:].max().item()))
    if p.step is not None:
        return _cache_template(key, _sequential_template(p))
    top_t = p.tau.max().item()  # an int, or a float under a fractional stride
    if p.circle is not None:
        template = circle_template(len(p.tau), p.tile_h, p.tile_w, *p.circle)
        top_t, top_hw = template[0].max().item(), template[1:].max().item()
    elif p.token_time:
        template, top_t = _token_time_template(len(p.tile_h0), len(p.tau), p.tile_h * p.tile_w)
        top_hw = top_t
    elif p.symmetric:
        template = symmetric_template(p.tau, p.tile_h, p.tile_w)
        top_hw = top_t + p.tile_h + p.tile_w - 2
    else:
        template, top_hw = _axes_template(p)
    entry = (template, top_t, top_hw)
    if p.wrap is not None:  # start wrapper at 0, the block from 1, the end wrapper where text resumes
        end = 1 + (
            max(p.span_h, p.span_w) if p.advance == "spatial" else block_advance(p.advance, top_t, top_hw)
        )
        a = template.shape[0]
        wrapped = np.empty((a + 1, template.shape[1] + 2), dtype=template.dtype)  # row A: the token ids
        wrapped[:a, 0] = 0
        np.add(template, 1, out=wrapped[:a, 1:-1])
        wrapped[:a, -1] = end
        wrapped[a] = p.token_id
        wrapped[a, 0], wrapped[a, -1] = p.wrap
        wrapped.flags.writeable = False
        entry = (wrapped[:a], max(end, 1 + top_t, 1 + top_hw), end + 1, wrapped[a])
    return _cache_template(key, entry)


def _cache_template(key: tuple, entry: tuple) -> tuple:
    """``entry`` made read-only and kept under ``key`` in the template cache (within its budget)."""
    global _template_tokens
    entry[0].flags.writeable = False
    n = entry[0].shape[1]
    if n <= _TEMPLATE_BUDGET // 4:
        if _template_tokens + n > _TEMPLATE_BUDGET:
            _TEMPLATES.clear()
            _template_tokens = 0
        _TEMPLATES[key] = entry
        _template_tokens += n
    return entry


def _axes_template(p: Block) -> tuple[np.ndarray, int]:
    """The ``[3, n]`` rows tau, h, w of a block relative to its start and its largest relative h or w."""
    nt, frames, th, tw = len(p.tile_h0), len(p.tau), p.tile_h, p.tile_w
    template = np.empty((3, nt, frames, th, tw), dtype=np.result_type(p.tau, np.int64))
    template[0] = p.tau[None, :, None, None]
    template[1] = p.h0 + p.tile_h0[:, None, None, None] + np.arange(th, dtype=np.int64)[None, None, :, None]
    template[2] = p.w0 + p.tile_w0[:, None, None, None] + np.arange(tw, dtype=np.int64)[None, None, None, :]
    top_hw = max(p.h0 + int(p.tile_h0.max()) + th - 1, p.w0 + int(p.tile_w0.max()) + tw - 1)
    if p.follow_t:
        template[1:] += p.tau[None, None, :, None, None]
        top_hw += p.tau.max().item()
    return template.reshape(3, -1), top_hw


def _token_time_template(tiles: int, frames: int, frame_tokens: int) -> tuple[np.ndarray, float]:
    """``spatial="token_time"``: token ``m`` of the block (in emission order), in frame ``f``, at
    ``(m + f) / 2`` on every axis (float64 ``[3, n]``), and the largest of them, ``(n - 1 + frames - 1) / 2``.
    TAD-RoPE's position is the sequence index plus a time index that steps once per frame (VideoRoPE
    modeling_videorope.py:1628-1833 at 7712ca3, summed at :2108-2115); these are its halves."""
    m = np.arange(tiles * frames * frame_tokens, dtype=np.float64).reshape(tiles, frames, frame_tokens)
    rel = (m + np.arange(frames, dtype=np.float64)[None, :, None]) / 2
    template = np.repeat(rel.reshape(1, -1), 3, axis=0)
    return template, (m.size - 1 + frames - 1) / 2


def symmetric_template(tau: np.ndarray, hh: int, ww: int) -> np.ndarray:
    """VRoPE's four rows of a ``T' x hh x ww`` block relative to its start, int64 ``[4, T' hh ww]``:
    token ``(i, j, k)`` gets ``tau[i]`` plus ``j + k``, ``j + (ww - 1 - k)``, ``(hh - 1 - j) + k`` and
    ``(hh - 1 - j) + (ww - 1 - k)``, the grid and its mirror images in w, in h and in both
    (johncaged/VRoPE vrope.py:117-138 at 1bb9363: rows ordered h-index then w-index, each plain then
    flipped)."""
    j = np.arange(hh, dtype=np.int64)[:, None]
    k = np.arange(ww, dtype=np.int64)[None, :]
    maps = np.stack([j + k, j + (ww - 1 - k), (hh - 1 - j) + k, (hh - 1 - j) + (ww - 1 - k)])  # [4, hh, ww]
    template = maps[:, None] + tau.astype(np.int64)[None, :, None, None]  # [4, T', hh, ww]
    return template.reshape(4, -1)


def _sequential_template(p: Block) -> tuple:
    """The template of a ``spatial="sequential"`` block (V2PE): its ``N`` tokens' token ``k = 1 .. N`` at
    ``k * step - 1`` from the block start on every axis (``s - 1 + k * step``: ``step`` apart from the
    token before the block; OpenGVLab/V2PE internvl/model/internvl_chat/modeling_internvl_chat.py:665-669),
    exact in float64 for a step of a few binary digits; its largest relative t and h or w, both the last."""
    n, step = p.n, p.step  # (never wrapped: wrapped_block leaves sequential blocks alone)
    if float(step).is_integer():
        line = np.arange(1, n + 1, dtype=np.int64) * int(step) - 1
    else:
        line = np.arange(1, n + 1, dtype=np.float64) * float(step) - 1.0
    top = line[-1].item()
    return (np.broadcast_to(line, (3, n)), top, top)


def block_advance(advance: str, top_t: int, top_hw: int) -> int:
    """Where the next piece starts relative to a block's start ``s`` (its largest relative t and h or w
    given) under the advance rules that count from the block: ``"time"`` one past its last t, the
    others one past its largest coordinate (``"block"``; and ``"max+1"`` for an anchored block)."""
    return top_t + 1 if advance == "time" else max(top_t, top_hw) + 1


def wrapped_block(pieces: Sequence[TextRun | Block], advance: str) -> Block | None:
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
        or block.step is not None  # (the ceil advance reads the end's absolute float32 position)
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
    start: int = 0,
) -> int:
    """Fill ``ids[:, :sum(n)]`` (and ``tokens`` / ``spans`` when given) from ``pieces``.

    ``owners`` holds the segment index of each piece (default: each piece's own ``index``); spans and
    errors name it. Consecutive text runs continue one another's positions, so each streak of them
    (text, then a vision wrapper, ...) is written with one slice of ``0, 1, 2, ...``. ``start``: where
    the counter stands before the first piece (0; in a continued conversation, where the sequence
    before the pieces left it, as if they followed it: ``start - 1`` counts as its largest position).

    Returns the largest position written (``start - 1`` for an empty sequence).
    """
    a = 0  # token cursor
    top = start - 1  # max position so far
    s = start  # start of the next piece
    streak = -1  # token where the pending streak of text runs began (-1: none)
    streak_s = 0  # its first position
    spatial = advance == "spatial"
    own = advance in OWN_ADVANCES
    time = advance == "time"
    cached = _TEMPLATES.get
    for k, p in enumerate(pieces):
        n = p.n
        if type(p) is TextRun:
            if s + n > MAX_POSITION:
                owner = p.index if owners is None else owners[k]
                raise LayoutError(f"positions overflow: {p.kind} (segment {owner}) would reach {s + n - 1:,}")
            if streak < 0:
                streak, streak_s = a, s
            if tokens is not None:
                token = p.token_ids
                if n == 1:  # a wrapper token: a scalar write costs a seventh of a slice write
                    tokens[a] = token[0] if isinstance(token, (tuple, list)) else token
                else:
                    tokens[a : a + n] = token
            s += n
            if s > top:
                top = s - 1
            a += n
            continue
        b = a + n
        if streak >= 0:
            write_text(ids, streak, a, streak_s)
            streak = -1
        key = p.template_key
        entry = cached(key) if key is not None else None
        if entry is None:
            entry = block_template(p)
        if p.wrap is not None:  # start wrapper, block, end wrapper: all counted from s
            template, top_rel, next_rel, token_row = entry
            high = s + top_rel
            if high > MAX_POSITION:
                owner = p.index if owners is None else owners[k]
                raise LayoutError(
                    f"positions overflow: {p.kind} block (segment {owner}) would reach {high:,}"
                )
            add_template(template, s, s, ids[:, a:b])
            if tokens is not None:
                tokens[a:b] = token_row
            if time:  # the largest t: the end wrapper's
                high = s + next_rel - 1
            if high > top:
                top = high
            s += next_rel
            a = b
            continue
        template, top_t, top_hw = entry
        hw = s if p.anchored else 0
        high = max(s + top_t, hw + top_hw)
        if high > MAX_POSITION:
            owner = p.index if owners is None else owners[k]
            raise LayoutError(f"positions overflow: {p.kind} block (segment {owner}) would reach {high:,}")
        add_template(template, s, hw, ids[:, a:b])
        if tokens is not None:
            tokens[a:b] = p.token_id
        if p.gather is not None:  # a tile under tiles="thumbnail": the counter waits for its thumbnail
            a = b
            continue
        if own:
            top, s = advance_own(advance, s, top, high, top_t, top_hw)
            a = b
            continue
        if high > top:
            top = high
        s = s + max(p.span_h, p.span_w) if spatial else top + 1
        a = b
    if streak >= 0:
        write_text(ids, streak, a, streak_s)
    if spans is not None:
        spans += piece_spans(pieces, [p.index for p in pieces] if owners is None else owners)
    return top


OWN_ADVANCES = ("block", "time", "ceil")
"""The schemes' advance rules (:func:`advance_own`): the next start counted from the block alone
(:func:`block_advance`), or the ceiling of the largest position (``"ceil"``)."""


def advance_own(advance: str, s: int, top: int, high: int, top_t: int, top_hw: int) -> tuple[int, int]:
    """``(top, next start)`` after an unwrapped block that starts at ``s`` (``high``: its largest
    position) under an advance rule of :data:`OWN_ADVANCES`; ``top`` is the largest position so far, of
    the t row under ``"time"`` (where the decode delta counts from). ``"ceil"``: one past the ceiling of
    the largest float32 position (V2PE's ``torch.ceil(split_img_id_idxs[-1])``, modeling_internvl_chat.py:670)."""
    if advance == "ceil":
        top = max(top, high)
        return top, ceil32(top) + 1
    nxt = s + block_advance(advance, top_t, top_hw)
    return max(top, nxt - 1 if advance == "time" else high), nxt


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


def add_template(template: np.ndarray, t0: int, hw0: int, out: np.ndarray) -> None:
    """``out = template + (t0, hw0, hw0)`` per row, for ``template`` and ``out`` ``[3, n]`` (``[4, n]``
    of a symmetric block, always anchored: ``t0`` on every row).

    One ufunc call either way. With one offset on every row (anchored and wrapped blocks, the usual
    case) it is a scalar add while the block fits in one ufunc buffer (``3 n`` elements): against a
    ``[3, 1]`` offset column, which numpy (2.3+) copies through its buffer, or three 1-D adds, it is
    the cheaper call; above that, and with different offsets, a ``[3, 1]`` column."""
    a = template.shape[0]
    if t0 == hw0 and a * template.shape[1] <= _BUFFER_SIZE:
        np.add(template, t0, out=out)
    else:
        np.add(template, np.array(((t0,), *((hw0,),) * (a - 1)), dtype=np.int64), out=out)


def write_text(ids: np.ndarray, a: int, b: int, s: int | float) -> None:
    """``ids[:, a:b] = s, s+1, ...`` on every axis (one token: a scalar write; ``s`` a float after a
    block of fractional time)."""
    if b - a == 1:
        ids[:, a] = s
    elif type(s) is float:
        ids[:, a:b] = np.arange(b - a, dtype=np.float64) + s
    elif s + b - a <= _ARANGE.size:
        ids[:, a:b] = _ARANGE[s : s + b - a]
    else:
        ids[:, a:b] = np.arange(s, s + b - a, dtype=np.int64)


__all__ = [
    "OWN_ADVANCES",
    "ZERO_OFFSETS",
    "Block",
    "TextRun",
    "add_template",
    "advance_own",
    "block_advance",
    "block_template",
    "fill_pieces",
    "piece_spans",
    "sequential_step",
    "spatial_offset",
    "symmetric_template",
    "untiled_block",
    "wrapped_block",
    "write_text",
]
