"""One rank's shard built from the samples' layout plans, never the packed row's positions.

:func:`shard_samples` takes the samples of one packed row (what :func:`mrope.pack` puts in it, in row
order), plans them, reads the plans into one :class:`~mrope.packing._pieces.PieceTable` (the counter
evaluated across every sample with a few numpy calls) and writes only the token ranges the rank holds
(zigzag: two per sample; contiguous: the samples its slice overlaps) from it. The writes cost the
rank's tokens; the planning and the table cost the row's segments and pieces, a few Python steps each.

Samples whose engine is not the counter (the sequence, canvas and omni engines), or whose rules the
table does not evaluate (the research schemes' ``block`` and ``time`` advances, fractional time, VRoPE's
four rows), pruned samples (``keep=`` masks) and samples given as built :class:`mrope.Positions` are
built whole, one at a time, and cut: a rank then pays every such sample it touches whole (under zigzag,
every sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from mrope._builder import plan_sequence
from mrope._errors import MRopeError, PackingError
from mrope._layout import engine_for
from mrope._layout.counter import CounterPlan
from mrope._layout.pieces import OWN_ADVANCES
from mrope._layout.pruned import pruned_positions, segment_masks
from mrope._positions import Positions
from mrope.models import resolve_rules, resolve_tokenizer
from mrope.packing._pieces import Out, PieceTable, piece_table, tokens_at, write_ranges
from mrope.packing._shard import check_split, fill_padding, ranges, split_of, vision_map, vision_spans


class _Row(NamedTuple):
    """The samples of a row as a rank reads them: ``lengths`` ``[n]``, ``built`` (samples built whole,
    by index), ``planned`` ``[n + 1]`` (False past the samples) and their ``table`` (None when none
    is), ``built_vision`` ``[n, 4]`` (:func:`_built_vision`), the positions' rows and dtype."""

    lengths: np.ndarray
    built: dict[int, Positions]
    planned: np.ndarray
    table: PieceTable | None
    built_vision: np.ndarray
    axes: int
    dtype: np.dtype


def _row(samples: Sequence[Any], model: Any, rules: Any, tokenizer: Any, convention: str) -> _Row:
    """Plan ``samples``: the counter engine's plans are read into one table, the others built whole."""
    tokenizer = resolve_tokenizer(model, tokenizer) if model is not None else tokenizer
    built: dict[int, Positions] = {}
    lists = [i for i, s in enumerate(samples) if type(s) is list]
    masks = segment_masks(list(chain.from_iterable(samples[i] for i in lists)))
    firsts = np.cumsum([0] + [len(samples[i]) for i in lists])
    masked = {lists[j] for j in (np.searchsorted(firsts, list(masks), side="right") - 1).tolist()}
    planning = lists or not all(isinstance(s, Positions) for s in samples)
    lay = resolve_rules(model, rules, convention) if planning else None
    ranged = (
        lay is not None
        and engine_for(lay) == "counter"
        and lay.advance not in OWN_ADVANCES  # the piece table knows the max+1 and spatial advances
        and not lay.fractional_time  # and int64 positions
        and lay.num_axes == 3  # of three rows t, h, w (not VRoPE's four symmetric maps)
        and lay.spatial != "sequential"  # and blocks laid out by their grids
        and lay.tiles != "thumbnail"
    )
    mine = [i for i in lists if i not in masked] if ranged else []
    plans, ends = _plan_all(samples, mine, lay, tokenizer)
    for i in sorted(set(range(len(samples))) - set(mine)):
        sample = samples[i]
        if isinstance(sample, Positions):
            built[i] = sample
            continue
        try:
            built[i] = _built(plan_sequence(sample, lay, tokenizer), sample)
        except MRopeError as exc:  # name the sample, as mrope.pack does
            raise type(exc)(f"sample {i}: {exc}") from exc
    counts = np.diff(np.array([0, *ends], dtype=np.int64))
    n = len(samples)
    lengths = np.zeros(n, dtype=np.int64)
    for i, p in built.items():
        lengths[i] = p.num_tokens
    planned = np.zeros(n + 1, dtype=bool)
    planned[mine] = True
    vision = _built_vision(built, n)
    table = None
    if mine:
        one = len(plans) == 1  # most rows: one plan holds every sample's pieces, no copy
        pieces = plans[0].pieces if one else list(chain.from_iterable(p.pieces for p in plans))
        owners = plans[0].owners if one else list(chain.from_iterable(p.owners for p in plans))
        table = piece_table(lay, pieces, owners, counts, vision[mine], mine)
        lengths[mine] = np.diff(table.bounds)
    first = built.get(0)
    axes = lay.num_axes if first is None else int(first.ids.shape[0])
    return _Row(
        lengths, built, planned, table, vision, axes, np.dtype(np.int64) if first is None else first.ids.dtype
    )


def _plan_all(
    samples: Sequence[Any], order: Sequence[int], lay: Any, tokenizer: Any
) -> tuple[list[CounterPlan], list[int]]:
    """Counter plans of samples ``order`` (segment lists), one after another in as few plans as can
    hold them (images to generate end a plan), and where each sample's pieces end among them all."""
    plans: list[CounterPlan] = []
    ends: list[int] = []
    if not order:
        return plans, ends
    plan = CounterPlan(lay)
    plans.append(plan)
    done = 0  # pieces of the plans before this one
    i = order[0]
    try:
        for i in order:
            if plan.targets:
                done += len(plan.pieces)
                plan = CounterPlan(lay)
                plans.append(plan)
            plan.extend(samples[i], tokenizer)
            ends.append(done + len(plan.pieces))
    except MRopeError as exc:  # name the sample, as mrope.pack does
        raise type(exc)(f"sample {i}: {exc}") from exc
    return plans, ends


def _built(plan: Any, segments: Sequence[Any]) -> Positions:
    masks = segment_masks(segments)
    return pruned_positions(plan.positions(), masks, segments) if masks else plan.positions()


def shard_samples(
    samples: Sequence[Any],
    *,
    model: Any = None,
    rules: Any = None,
    tokenizer: Any = None,
    convention: str = "released",
    world_size: int,
    rank: int,
    layout: str = "zigzag",
    width: int = 0,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """Rank ``rank``'s arrays of the packed row of ``samples`` (segment lists or :class:`mrope.Positions`,
    in row order, as :func:`mrope.pack` lays one row out), built from the samples' plans: equal to
    :func:`mrope.packing.shard` of that row (labels: the row's ``input_ids``), without the row's
    positions: the arrays of a :class:`~mrope.packing.ShardedRow`, its vision map included.

    Returns:
        ``input_ids``, ``position_ids`` (``[1 + A, L_r]``), ``mm_token_type_ids``, ``labels`` (shifted),
        ``token_index``, ``cu_seqlens_padded``, ``max_seqlen``, ``vision_item`` and ``vision_index``
        (``[L_r]``: each vision token's image or video in row order and its index among the row's
        merged tokens of its kind, -1 at text; see :class:`~mrope.packing.ShardedRow`). With int64
        positions the arrays are rows of one allocation: any one kept keeps them all.

    Raises:
        PackingError: a bad split or no samples; the builder's errors name the sample.
    """
    check_split(world_size, rank, layout)
    samples = list(samples)
    if not samples:
        raise PackingError(
            "shard_samples needs at least one sample (a row's segment lists or Positions); got none"
        )
    row = _row(samples, model, rules, tokenizer, convention)
    lengths, planned = row.lengths, row.planned
    split = split_of(lengths, world_size, rank, layout, width)
    n, total = len(lengths), int(split.count.sum())
    pos, block = _outputs(1 + row.axes, total, row.dtype)
    tokens, types, labels, index, item, where = block  # every column of tokens and labels is written
    out = Out(pos[1:], tokens, types, item, where)
    deltas = np.zeros(n, dtype=pos.dtype)
    after = np.zeros(len(split.segment), dtype=np.int64)  # the token after each range: its last label
    seg = split.segment
    lo = np.minimum(split.first, np.append(lengths, 0)[seg])
    seen = np.zeros((1, 4), dtype=np.int64)
    table = row.table
    if table is not None:
        which = np.flatnonzero(planned)
        deltas[which] = table.deltas
        seen = table.seen
        offsets = np.zeros(n + 1, dtype=np.int64)
        offsets[which] = table.bounds[:-1]  # where each planned sample starts in the table
        mine = np.flatnonzero(planned[seg])
        start = offsets[seg[mine]] + lo[mine]
        write_ranges(table, start, split.real[mine], split.local[mine], out)
        goes_on = mine[lo[mine] + split.real[mine] < lengths[seg[mine]]]  # its last label: the next token
        after[goes_on] = tokens_at(table, offsets[seg[goes_on]] + lo[goes_on] + split.real[goes_on])
    for k in np.flatnonzero(~planned[seg] & (seg < n)).tolist():  # samples built whole: cut
        g = int(seg[k])
        p, first, real, local = row.built[g], int(lo[k]), int(split.real[k]), int(split.local[k])
        deltas[g] = p.delta
        before = row.built_vision[g] + seen[np.searchsorted(np.flatnonzero(planned), g)]
        _cut(out, p, first, real, local, before)
        if first + real < p.num_tokens:
            after[k] = p.input_ids[first + real]
    labels[:-1] = tokens[1:]  # the next token; a range's last: the token after it
    last = split.local + split.real - 1
    labels[last[split.real > 0]] = after[split.real > 0]
    if pos.dtype == np.int64:  # the text row: each range's offsets in its segment
        ranges(split.first, split.count, pos[0])
    else:
        pos[0] = ranges(split.first, split.count)
    result = {"input_ids": tokens, "position_ids": pos, "mm_token_type_ids": types, "labels": labels}
    result["token_index"] = index
    fill_padding(split, result, deltas, pad_token_id)
    result["vision_item"], result["vision_index"] = item, where
    return result


def _outputs(rows: int, total: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """A rank's output arrays: positions ``[rows, total]`` of ``dtype`` and int64 ``[6, total]`` (tokens,
    types, labels, token index, vision item and index; types 0, the vision map -1, the rest unwritten).

    int64 positions share one allocation with the rest: one block, which numpy asks the kernel to back
    with huge pages, instead of seven of a few MiB each whose pages fault in one by one (one rank of a
    1 M-token row at world size 2: 520k tokens, int64 arrays just under numpy's 4 MiB huge-page
    threshold)."""
    if np.dtype(dtype) == np.int64:
        whole = np.empty((rows + 6, total), dtype=np.int64)
        pos, block = whole[:rows], whole[rows:]
    else:
        pos, block = np.empty((rows, total), dtype=dtype), np.empty((6, total), dtype=np.int64)
    block[1] = 0
    block[4:] = -1
    return pos, block


def _cut(out: Out, p: Positions, first: int, real: int, local: int, before: np.ndarray) -> None:
    """Tokens ``first .. first + real - 1`` of built ``p`` to columns ``local ..`` of ``out``; ``before``:
    the images, videos, image tokens and video tokens of the row before ``p``."""
    span = slice(local, local + real)
    out.ids[:, span] = p.ids[:, first : first + real]
    out.tokens[span] = p.input_ids[first : first + real]
    types = out.types[span] = p.mm_token_type_ids[first : first + real]
    item, index = vision_map(vision_spans([p], _ZERO), np.arange(first, first + real), types)
    kind = types - 1
    out.item[span] = np.where(item >= 0, item + before[kind], -1)
    out.index[span] = np.where(index >= 0, index + before[kind + 2], -1)


_ZERO = np.zeros(1, dtype=np.int64)


def _built_vision(built: dict[int, Positions], n: int) -> np.ndarray:
    """int64 ``[n, 4]``: the images, videos, image tokens and video tokens of the ``built`` samples
    before each of ``n`` samples."""
    counts = np.zeros((n + 1, 4), dtype=np.int64)
    for g, p in built.items():
        if not (len(p.image_grid_thw) or len(p.video_grid_thw)):
            continue
        rows = vision_spans([p], _ZERO)
        for c in (1, 2):
            kind = rows[:, 3] == c
            if kind.any():
                counts[g + 1, c - 1] = rows[kind, 1].max() + 1
                counts[g + 1, c + 1] = rows[kind, 4].sum()
    return np.cumsum(counts, axis=0)[:-1]


__all__ = ["shard_samples"]
