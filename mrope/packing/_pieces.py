"""The planned samples of a packed row as arrays: the counter run across all samples at once, and any
token ranges of the row written from it.

A counter plan (:class:`mrope._layout.counter.CounterPlan`) is a list of pieces (text runs, vision
blocks). :func:`piece_table` reads every sample's pieces once into flat arrays (one Python step per
piece: its size, kind and block shape) and evaluates the counter rule across them with cumulative sums:
each piece starts at ``s_{k+1} = max(s_k + a_k, b_k)`` (``a_k``: the piece's advance, ``b_k``: a reset
block's floor), the recurrence :func:`mrope._layout.pieces.fill_pieces` steps through, restarting at 0
with each sample. :func:`write_ranges` then gives any token ranges of the row with a fixed number of
numpy calls over their tokens and the pieces they overlap: a text token is ``s + offset`` on every axis,
a block token's ``(t, h, w)`` is unravelled from its offset in the block (tile, frame, row, column) as
:func:`mrope._layout.pieces.block_template` lays a block out.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from itertools import count as numbers
from typing import Any, NamedTuple

import numpy as np

from mrope._caches import register
from mrope._errors import LayoutError
from mrope._grid import MAX_POSITION
from mrope._layout.pieces import TextRun, add_template, block_template
from mrope._positions import SPAN_TYPES
from mrope.packing._shard import ranges


class PieceTable(NamedTuple):
    """The pieces of ``m`` planned samples, ``[P]`` each, in row order (blocks' fields: 0 at text runs).

    ``start``: the piece's first token, the samples laid end to end (``bounds``: ``[m + 1]`` where each
    sample starts, and the end); ``n``: tokens; ``s``: where the counter stands at it; ``text``: a text run;
    ``token``: its token id (-1: a text run with ids of its own, ``runs`` holds them by piece);
    ``pieces``: the pieces themselves; ``hw``: where a block's h and w count from (``s``; 0 for a
    reset block).
    A block's token ``(tile, frame, row, column)`` (C order of ``[tiles, frames, tile_h, tile_w]``,
    ``plane = tile_h * tile_w``, ``tile_w`` with the row newline) is at ``t_base + tau[tau_at + frame]``,
    ``h_base + row``, ``w_base + column`` (plus ``tile_h0`` / ``tile_w0`` ``[tile_at + tile]`` when
    ``tiled``, else those are in the bases; plus the frame's t offset on h and w where ``follow``);
    ``wrap``: 1 for a block with its wrapper tokens (``wrap_ids`` ``[P, 2]``), at ``s`` and ``s + end``;
    ``kind``: the modality type of its vision tokens (1 image, 2 video); ``item`` / ``first``: its
    image or video (row order, one per segment) and its first vision token's index among its kind's.
    ``deltas``: ``[m]`` each sample's decode delta; ``seen``: ``[m + 1, 4]`` the images, videos, image
    tokens and video tokens of the plans before each plan."""

    start: np.ndarray
    bounds: np.ndarray
    n: np.ndarray
    s: np.ndarray
    text: np.ndarray
    token: np.ndarray
    runs: dict[int, Any]
    pieces: Sequence[Any]
    hw: np.ndarray
    frames: np.ndarray
    plane: np.ndarray
    tile_w: np.ndarray
    t_base: np.ndarray
    h_base: np.ndarray
    w_base: np.ndarray
    tiled: bool
    follows: bool
    follow: np.ndarray
    wrap: np.ndarray
    end: np.ndarray
    wrap_ids: np.ndarray
    tau_at: np.ndarray
    tile_at: np.ndarray
    tau: np.ndarray
    tile_h0: np.ndarray
    tile_w0: np.ndarray
    kind: np.ndarray
    item: np.ndarray
    first: np.ndarray
    deltas: np.ndarray
    seen: np.ndarray


_BLOCK_FIELDS = 17  # ints per distinct block in _block_rows


_ROWS: dict[tuple[int, bool], tuple[Any, tuple[int, ...]]] = {}
"""Each block's row (:func:`_block_row`) by its id and the advance rule, the block kept with it (so the
id stays its own): the planners share the blocks of repeated images and videos, so a row is read once."""
_ROW_LIMIT = 4096

register("packing.block_rows", _ROWS.clear, lambda: len(_ROWS), _ROW_LIMIT)


def _block_row(p: Any, spatial: bool) -> tuple[int, ...]:
    """A block's 17 ints: frames, tile_h, tile_w, tiles, h0, w0, anchored, follow, wrap, end, start id,
    end id, advance, top, kind, tokens, token id.

    ``advance`` / ``top``: what the counter adds after the block and its largest position, both from
    ``s``; ``end``: a wrapped block's end wrapper offset, a reset block's largest h / w (from 0; its
    ``top`` is then its t's alone)."""
    entry = block_template(p)
    wrapped = p.wrap is not None
    if wrapped:  # (template, top_rel, next_rel, token row): all counted from s
        top, advance, end = entry[1], entry[2], entry[2] - 1
        start_id, end_id = p.wrap
    else:
        top_t, top_hw = entry[1], entry[2]
        top = max(top_t, top_hw) if p.anchored else top_t
        advance = max(p.span_h, p.span_w) if spatial else top + 1
        end = top_hw  # a reset block's largest h / w (from 0)
        start_id = end_id = 0
    frames, th, tw = p.tile_grid
    kind = SPAN_TYPES.get(p.kind, 0)
    anchored = p.anchored or wrapped
    return (
        frames,
        th,
        tw,
        len(p.tile_h0),
        p.h0,
        p.w0,
        anchored,
        p.follow_t,
        wrapped,
        end,
        start_id,
        end_id,
        advance,
        top,
        kind,
        p.n,
        p.token_id,
    )


def _block_rows(blocks: Sequence[Any], spatial: bool) -> np.ndarray:
    """int64 ``[B, 17]``: the :func:`_block_row` of each of ``blocks``."""
    rows = []
    get = _ROWS.get
    for p in blocks:
        hit = get((id(p), spatial))
        if hit is None or hit[0] is not p:
            if len(_ROWS) >= _ROW_LIMIT:
                _ROWS.clear()
            hit = _ROWS[id(p), spatial] = (p, _block_row(p, spatial))
        rows.append(hit[1])
    return np.array(rows, dtype=np.int64).reshape(-1, _BLOCK_FIELDS)


def _columns(
    pieces: Sequence[Any], text: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, Any]]:
    """int64 ``[P]`` each: the tokens, the token id (-1 for a text run with ids of its own) and the
    modality type of every piece (``text``: bool ``[P]``, the text runs; ``rows``: the blocks'
    :func:`_block_row`, in order), and the ids of those runs by piece. The text runs (named tuples)
    are read in one transposition."""
    size = len(pieces)
    n, token, kind = np.empty((3, size), dtype=np.int64)
    at, run_at = np.flatnonzero(~text), np.flatnonzero(text)
    n[at], kind[at], token[at] = rows[:, 15], rows[:, 14], rows[:, 16]
    runs: dict[int, Any] = {}
    if not len(run_at):
        return n, token, kind, runs
    sizes, ids, kinds, _ = zip(*compress(pieces, text), strict=True)
    n[run_at] = sizes
    kind[run_at] = np.fromiter(map(SPAN_TYPES.get, kinds, repeat(0)), dtype=np.int64, count=len(kinds))
    try:  # most runs repeat one id (a placeholder): one call
        token[run_at] = np.fromiter(ids, dtype=np.int64, count=len(ids))
    except (TypeError, ValueError):
        places = run_at.tolist()
        runs = {k: x for k, x in zip(places, ids, strict=True) if not isinstance(x, (int, np.integer))}
        token[run_at] = [-1 if k in runs else x for k, x in zip(places, ids, strict=True)]
    return n, token, kind, runs


def _exclusive(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x) + 1, dtype=np.int64)
    np.cumsum(x, out=out[1:])
    return out


def _segmented_max(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running maximum of non-negative int64 ``values`` restarting with each ``group`` (non-decreasing)."""
    top = int(values.max()) + 1 if len(values) else 1
    if top * (int(group[-1]) + 1) >= 1 << 62:  # the offsets would overflow: one group at a time
        out = values.copy()
        for lo, hi in zip(*_bounds(group), strict=True):
            np.maximum.accumulate(out[lo:hi], out=out[lo:hi])
        return out
    shift = group * top
    return np.maximum.accumulate(values + shift) - shift


def _bounds(group: np.ndarray) -> tuple[list[int], list[int]]:
    cut = np.flatnonzero(np.diff(group)) + 1
    return [0, *cut.tolist()], [*cut.tolist(), len(group)]


def piece_table(
    rules: Any,
    pieces: Sequence[Any],
    owners: Sequence[int],
    counts: np.ndarray,
    built: np.ndarray,
    samples: Sequence[int],
) -> PieceTable:
    """The :class:`PieceTable` of ``m`` samples planned under counter ``rules``: their ``pieces`` one
    sample after another (``owners``: each one's segment in its sample; ``counts`` ``[m]``: pieces per
    sample), laid end to end from token 0; ``built``: ``[m, 4]`` the images, videos, image tokens and
    video tokens of the row's other samples (not planned here) before each sample, which the vision
    numbering counts too; ``samples``: each sample's index in the row, for errors.

    Raises:
        LayoutError: a sample's positions would pass :data:`mrope._grid.MAX_POSITION`."""
    spatial = rules.advance == "spatial"
    m = len(counts)
    sample = np.repeat(np.arange(m), counts)
    size = len(pieces)  # the per-piece reads are C loops (map), a Python step per piece at most
    text = np.fromiter(map(isinstance, pieces, repeat(TextRun)), dtype=bool, count=size)
    owner = np.array(owners, dtype=np.int64)
    at = np.flatnonzero(~text)
    blocks = list(compress(pieces, ~text))
    seen_at: dict[int, int] = {}  # each block's first place among the blocks (they share blocks)
    places = np.fromiter(
        map(seen_at.setdefault, map(id, blocks), numbers()), dtype=np.int64, count=len(blocks)
    )
    firsts, which = np.unique(places, return_inverse=True)
    unique = [blocks[i] for i in firsts.tolist()]
    distinct_rows = _block_rows(unique, spatial)
    rows = distinct_rows[which]
    n, token, kind, runs = _columns(pieces, text, rows)
    # the counter: s_{k+1} = max(s_k + a_k, b_k), restarting at 0 with each sample
    first_piece = _exclusive(counts)[:-1]
    advance = n.copy()
    advance[at] = rows[:, 12]
    s = _exclusive(advance)[:-1]
    s -= np.repeat(s[first_piece[counts > 0]], counts[counts > 0])
    loose = np.zeros(len(pieces), dtype=bool)  # reset blocks: h and w count from 0, not from s
    loose[at] = rows[:, 6] == 0
    reset = loose & ~np.bool_(spatial)
    if reset.any():  # under max+1 the next piece also starts past a reset block's h / w maximum
        lift = np.zeros(len(pieces), dtype=np.int64)
        lift[reset] = np.maximum(rows[reset[at], 9] + 1 - (s[reset] + advance[reset]), 0)
        carry = np.concatenate([[0], _segmented_max(lift, sample)[:-1]])  # M_k: the pieces before k
        carry[first_piece[counts > 0]] = 0
        s += carry
    high = s + n - 1
    high[at] = s[at] + rows[:, 13]
    high[loose] = np.maximum(high[loose], rows[loose[at], 9])
    if len(high) and int(high.max()) > MAX_POSITION:  # as the fill engine refuses it
        k = int(np.argmax(high > MAX_POSITION))
        raise LayoutError(
            f"sample {samples[sample[k]]}: positions overflow: {pieces[k].kind} (segment {owner[k]}) "
            f"would reach {int(high[k]):,}"
        )
    hw = s.copy()
    hw[loose] = 0
    deltas = np.zeros(m, dtype=np.int64)
    busy = counts > 0
    if busy.any() and not rules.generates_images:
        top = np.maximum.reduceat(high, first_piece[busy])
        deltas[busy] = top + 1 - np.add.reduceat(n, first_piece[busy])
    start = _exclusive(n)
    field = np.zeros((len(pieces), _BLOCK_FIELDS), dtype=np.int64)
    field[at] = rows
    # text runs of a vision kind (a grid border's placeholders) are typed too (kind)
    item, first, seen = _vision_numbers(kind, n - 2 * field[:, 8], sample, owner, m, built)
    tau_at = _spread(at, _exclusive(distinct_rows[:, 0])[which], len(pieces))
    tile_at = _spread(at, _exclusive(distinct_rows[:, 3])[which], len(pieces))
    tau, tile_h0, tile_w0 = (
        np.concatenate([getattr(p, name) for p in unique]) if unique else np.zeros(0, dtype=np.int64)
        for name in ("tau", "tile_h0", "tile_w0")
    )
    wrap = field[:, 8]
    h_base, w_base = hw + wrap + field[:, 4], hw + wrap + field[:, 5]
    tiled = bool((rows[:, 3] > 1).any())
    if not tiled and len(at):  # one tile each: its offset joins the bases
        h_base[at] += tile_h0[tile_at[at]]
        w_base[at] += tile_w0[tile_at[at]]
    return PieceTable(
        start=start[:-1],
        bounds=start[np.append(first_piece, len(pieces))],
        n=n,
        s=s,
        text=text,
        token=token,
        runs=runs,
        pieces=pieces,
        hw=hw,
        frames=field[:, 0],
        plane=field[:, 1] * field[:, 2],
        tile_w=field[:, 2],
        t_base=s + wrap,
        h_base=h_base,
        w_base=w_base,
        tiled=tiled,
        follows=bool(field[:, 7].any()),
        follow=field[:, 7],
        wrap=wrap,
        end=np.where(wrap == 1, field[:, 9], 0),
        wrap_ids=field[:, 10:12],
        tau_at=tau_at,
        tile_at=tile_at,
        tau=tau,
        tile_h0=tile_h0,
        tile_w0=tile_w0,
        kind=kind,
        item=item,
        first=first,
        deltas=deltas,
        seen=seen,
    )


def _spread(at: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    out[at] = values
    return out


def _vision_numbers(
    kind: np.ndarray, size: np.ndarray, plan: np.ndarray, owner: np.ndarray, plans: int, built: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each piece's image or video (one per segment, in row order) and its first vision token's index
    among its kind's, as :func:`mrope.packing._shard.vision_spans` numbers the row's spans (``kind``:
    its vision tokens' type, 0 for none; ``size``: how many; ``plan``, ``owner``: its sample and
    segment), given ``built``: ``[m, 4]`` the images, videos, image tokens and video tokens of the
    row's other samples before each plan's; and ``[m + 1, 4]`` the same counts of the plans alone
    before each plan."""
    item = np.zeros(len(kind), dtype=np.int64)
    first = np.zeros(len(kind), dtype=np.int64)
    seen = np.zeros((plans + 1, 4), dtype=np.int64)
    for c in (1, 2):
        mine = np.flatnonzero(kind == c)
        if not mine.size:
            continue
        key = plan[mine] * (int(owner.max()) + 1) + owner[mine]
        new = np.concatenate([[True], key[1:] != key[:-1]])
        item[mine] = np.cumsum(new) - 1 + built[plan[mine], c - 1]
        before = _exclusive(size[mine])
        first[mine] = before[:-1] + built[plan[mine], c + 1]
        # the plans before each plan: its first piece's numbers, or the next plan's
        head = np.searchsorted(plan[mine], np.arange(plans + 1), side="left")
        seen[:, c - 1] = np.concatenate([[0], np.cumsum(new)])[head]
        seen[:, c + 1] = before[head]
    return item, first, seen


class Out(NamedTuple):
    """Output arrays a table's tokens are written into (columns chosen by the caller): ``ids``
    ``[A, C]`` the M-RoPE rows, ``tokens``, ``types``, ``item`` and ``index`` ``[C]`` (``item`` /
    ``index``: a vision token's image or video and its index among its kind's; -1 for text, as the
    caller initialises them)."""

    ids: np.ndarray
    tokens: np.ndarray
    types: np.ndarray
    item: np.ndarray
    index: np.ndarray


def write_ranges(table: PieceTable, lo: np.ndarray, count: np.ndarray, dest: np.ndarray, out: Out) -> None:
    """Write the tokens ``lo[j] .. lo[j] + count[j] - 1`` (flat row coordinates, ``[R]`` each, inside
    the table's samples) to columns ``dest[j] ..`` (increasing) of ``out``: numpy calls over the ranges'
    tokens and the pieces they overlap, plus one slice per overlapped text run with ids of its own.
    Columns between the ranges get ids and positions of no meaning (the caller's padding: it writes
    them afterwards)."""
    starts = table.start
    k0 = np.searchsorted(starts, lo, side="right") - 1
    over = np.where(count > 0, np.searchsorted(starts, lo + count, side="left") - k0, 0)
    piece = ranges(k0, over)
    rng = np.repeat(np.arange(len(lo)), over)
    clip_lo = np.maximum(starts[piece], lo[rng])
    length = np.minimum(starts[piece] + table.n[piece], (lo + count)[rng]) - clip_lo
    first = clip_lo - starts[piece]  # each overlap's first offset in its piece
    col = dest[rng] + clip_lo - lo[rng]  # and its first column
    # long block overlaps are cut from their templates after the batches; the others go a batch of
    # about _BATCH tokens at a time: the temporaries stay small enough to be reused by the allocator and
    # to stay in cache (one big temporary per step faults its pages in)
    whole = ~table.text[piece] & (length >= _WHOLE)
    rest = np.flatnonzero(~whole)
    cuts = np.searchsorted(np.cumsum(length[rest]), np.arange(_BATCH, int(length[rest].sum()), _BATCH))
    for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rest)], strict=True):
        if a == z:
            continue
        j = rest[a:z]
        p, f, m, c = piece[j], first[j], length[j], col[j]
        span = int(c[-1] + m[-1] - c[0])  # the batch's columns, the long overlaps' between them included
        _text(table, p, f, m, c, out, span > 2 * int(m.sum()))
        b = ~table.text[p]
        if b.any():
            _blocks(table, p[b], f[b], m[b], c[b], out)
    for j in np.flatnonzero(whole).tolist():  # after: see _text
        _block_slice(table, int(piece[j]), int(first[j]), int(length[j]), int(col[j]), out)


_WHOLE = 512
"""Overlaps of a block this long or longer are cut from its cached template (one add, a Python step
each: long videos); shorter ones are unravelled token by token with the others in one batch."""
_BATCH = 65536
"""Tokens written per batch of overlaps: int64 temporaries of 512 KiB, which the allocator reuses from
batch to batch (glibc's mmap threshold rises past them once a bigger array has been freed). Each batch
costs a few dozen numpy calls: at 8,192 tokens they were about 15% of a world-size-8 rank's build of a
1 M-token row of short samples (16 batches); from 131,072 on the temporaries fault pages in again."""


def _text(
    table: PieceTable,
    piece: np.ndarray,
    first: np.ndarray,
    length: np.ndarray,
    col: np.ndarray,
    out: Out,
    scatter: bool,
) -> None:
    """The text runs among overlaps (``piece``, ``first`` offset, ``length``, first column ``col``, in
    column order): ``s + offset`` on every M-RoPE row, and their ids. Unless ``scatter`` (the overlaps'
    columns are mostly others', such as long blocks') they are written as step functions over all the
    columns from the first overlap's to the last's (contiguous writes; the blocks' columns are written
    again by :func:`_blocks` and :func:`_block_slice`), else at their own columns only."""
    text = table.text[piece]
    if scatter:
        piece, first, length, col = piece[text], first[text], length[text], col[text]
        at = ranges(col, length)
        out.ids[:, at] = ranges(table.s[piece] + first, length)
        out.tokens[at] = np.repeat(table.token[piece], length)
        text = np.ones(len(piece), dtype=bool)
    elif len(piece):
        c0, c1 = int(col[0]), int(col[-1] + length[-1])
        at = col - c0
        step = np.zeros(c1 - c0, dtype=np.int64)
        step[at] = np.diff(table.s[piece] + first - col, prepend=0)  # text: column c holds c + delta
        np.cumsum(step, out=step)
        step += np.arange(c0, c1, dtype=np.int64)
        out.ids[:, c0:c1] = step
        step[:] = 0
        step[at] = np.diff(table.token[piece], prepend=0)
        np.cumsum(step, out=out.tokens[c0:c1])
    if table.kind[piece[text]].any():  # a grid border's placeholders: text positions, vision tokens
        piece, first, length, col = piece[text], first[text], length[text], col[text]
        at, k, offset = ranges(col, length), np.repeat(piece, length), ranges(first, length)
        vision = table.kind[k] != 0
        at, k, offset = at[vision], k[vision], offset[vision]
        out.types[at] = table.kind[k]
        out.item[at] = table.item[k]
        out.index[at] = table.first[k] + offset
    if table.runs:
        for j in np.flatnonzero(table.token[piece] == -1).tolist():
            a, m, c = int(first[j]), int(length[j]), int(col[j])
            out.tokens[c : c + m] = table.runs[int(piece[j])][a : a + m]


def tokens_at(table: PieceTable, where: np.ndarray) -> np.ndarray:
    """int64 ``[k]``: the ids of the tokens at flat row coordinates ``where`` ``[k]`` (inside the table's
    samples)."""
    out = Out(
        np.empty((3, len(where)), dtype=np.int64),
        np.empty(len(where), dtype=np.int64),
        *np.empty((3, len(where)), dtype=np.int64),
    )
    one = np.ones(len(where), dtype=np.int64)
    write_ranges(table, where, one, np.arange(len(where)), out)
    return out.tokens


def _block_slice(table: PieceTable, k: int, first: int, length: int, col: int, out: Out) -> None:
    """Tokens ``first .. first + length - 1`` of block piece ``k`` to columns ``col ..`` of ``out``, cut
    from the block's template (:func:`mrope._layout.pieces.block_template`, as the fill engine adds it)."""
    p = table.pieces[k]
    entry = block_template(p)
    cols, part = slice(col, col + length), slice(first, first + length)
    add_template(entry[0][:, part], int(table.s[k]), int(table.hw[k]), out.ids[:, cols])
    out.tokens[cols] = entry[3][part] if p.wrap is not None else p.token_id
    kind = int(table.kind[k])
    if kind:
        wrap = int(table.wrap[k])
        a, z = max(first, wrap), min(first + length, int(table.n[k]) - wrap)  # its vision tokens
        if a < z:
            vision = slice(col + a - first, col + z - first)
            out.types[vision] = kind
            out.item[vision] = table.item[k]
            start = int(table.first[k]) - wrap
            out.index[vision] = np.arange(start + a, start + z, dtype=np.int64)


def _blocks(table: PieceTable, k: np.ndarray, u0: np.ndarray, m: np.ndarray, c: np.ndarray, out: Out) -> None:
    """Write block overlaps (piece ``k``, its tokens ``u0 .. u0 + m - 1``) to columns ``c .. c + m - 1``
    of ``out``, each ``[R]``: the block's token ``v = u - wrap`` is ``(tile, frame, row, column)`` in C
    order of ``[tiles, frames, tile_h, tile_w]``, at ``(s + tau[frame], hw + h0 + tile_h0[tile] + row,
    hw + w0 + tile_w0[tile] + column)`` (h and w also ``+ tau[frame]`` when ``follow``; everything ``+ 1``
    past a start wrapper). The tokens go in runs along a block row (tile, frame and row fixed, the
    column counting up): the unravelling costs a few steps per run, the writes a few per token."""
    wrap = table.wrap[k]
    if wrap.any():  # wrapper tokens: s (start, offset 0) and s + end (end, offset n - 1) on every row
        for side, edge in enumerate((u0 == 0, u0 + m == table.n[k])):
            edge &= wrap == 1
            if edge.any():
                ke, we = k[edge], c[edge] + side * (m[edge] - 1)
                out.ids[:, we] = table.s[ke] + side * table.end[ke]
                out.tokens[we] = table.wrap_ids[ke, side]
    v0 = np.maximum(u0 - wrap, 0)  # the overlap's inner tokens: v0 .. v1 - 1, from column c0
    v1 = np.minimum(u0 + m - wrap, table.n[k] - 2 * wrap)
    c0 = c + v0 - (u0 - wrap)
    tw = table.tile_w[k]
    runs = np.where(v1 > v0, (v1 - 1) // tw - v0 // tw + 1, 0)
    j = np.repeat(np.arange(len(k)), runs)
    line = ranges(v0 // tw, runs)  # each run's row among the block's rows (tiles, frames, rows)
    k, tw, v0 = k[j], tw[j], v0[j]
    lo = np.maximum(v0, line * tw)  # each run's first inner token and its count
    count = np.minimum(v1[j], (line + 1) * tw) - lo
    frame, row = np.divmod(line, table.plane[k] // tw)
    if table.tiled:
        tile, frame = np.divmod(frame, table.frames[k])
    tau = table.tau[table.tau_at[k] + frame]
    h, w = table.h_base[k] + row, table.w_base[k] + lo - line * tw
    if table.tiled:
        h += table.tile_h0[table.tile_at[k] + tile]
        w += table.tile_w0[table.tile_at[k] + tile]
    if table.follows:
        lift = tau * table.follow[k]
        h += lift
        w += lift
    at = ranges(c0[j] + lo - v0, count)
    ids = out.ids
    ids[0, at] = np.repeat(table.t_base[k] + tau, count)
    ids[1, at] = np.repeat(h, count)
    ids[2, at] = ranges(w, count)
    out.tokens[at] = np.repeat(table.token[k], count)
    vision = table.kind[k] != 0  # blocks of another kind (none today) are text to the map
    if not vision.all():
        at = ranges((c0[j] + lo - v0)[vision], count[vision])
        k, lo, count = k[vision], lo[vision], count[vision]
    out.types[at] = np.repeat(table.kind[k], count)
    out.item[at] = np.repeat(table.item[k], count)
    out.index[at] = ranges(table.first[k] + lo, count)
