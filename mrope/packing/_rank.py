"""One rank's shard built from the samples' layout plans, never the packed row's positions.

:func:`shard_samples` takes the samples of one packed row (what :func:`mrope.pack` puts in it, in row
order), plans each, and fills only the token ranges the rank holds (zigzag: two per sample; contiguous:
the samples its slice overlaps) with the range form of the fill engine
(:func:`mrope._layout.pieces.fill_pieces` with ``lo`` / ``hi``; :meth:`CounterPlan.range_arrays`). The
writes cost the rank's tokens; the planning and the counter's pass cost the row's pieces.

Samples whose engine has no range form (the sequence, canvas and omni engines), pruned samples
(``keep=`` masks) and samples given as built :class:`mrope.Positions` are built whole, one at a time, and
cut: a rank then pays every such sample it touches whole (under zigzag, every sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._builder import plan_sequence
from mrope._errors import MRopeError, PackingError
from mrope._layout.pruned import pruned_positions, segment_masks
from mrope._positions import Positions
from mrope.models import resolve_rules, resolve_tokenizer
from mrope.packing._shard import check_split, fill_padding, split_of


class _Sample:
    """One sample as the rank reads it: its token count, and ``fill(ids, tokens, types, lo, hi)``, which
    writes its tokens ``lo .. hi - 1`` into the ``[A, hi - lo]`` / ``[hi - lo]`` views given, the types of
    the first ``len(types)`` of them into ``types`` (zero beforehand; vision tokens written), and returns
    its delta: from its plan's range form, or cut from its built positions."""

    def __init__(self, plan: Any, built: Positions | None) -> None:
        self.plan, self.built = plan, built
        self.num_tokens = built.num_tokens if built is not None else plan.num_tokens
        self.types: np.ndarray | None = None

    def fill(self, ids: np.ndarray, tokens: np.ndarray, types: np.ndarray, lo: int, hi: int) -> Any:
        p = self.built
        if p is None:
            return self.plan.fill_range(ids, tokens, types, lo, hi, self.num_tokens)
        if self.types is None:
            self.types = p.mm_token_type_ids
        ids[:] = p.ids[:, lo:hi]
        tokens[:] = p.input_ids[lo:hi]
        types[:] = self.types[lo : lo + types.shape[0]]
        return p.delta

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64) if self.built is None else self.built.ids.dtype

    @property
    def axes(self) -> int:
        return self.plan.rules.num_axes if self.built is None else int(self.built.ids.shape[0])


def _samples(
    samples: Sequence[Any], model: Any, rules: Any, tokenizer: Any, convention: str
) -> list[_Sample]:
    tokenizer = resolve_tokenizer(model, tokenizer) if model is not None else tokenizer
    lay = None
    out = []
    for i, sample in enumerate(samples):
        if isinstance(sample, Positions):
            out.append(_Sample(None, sample))
            continue
        if lay is None:
            lay = resolve_rules(model, rules, convention)
        try:
            plan = plan_sequence(sample, lay, tokenizer)
            ranged = getattr(plan, "fills_ranges", False) and not segment_masks(sample)
            out.append(_Sample(plan, None) if ranged else _Sample(None, _built(plan, sample)))
        except MRopeError as exc:  # name the sample, as mrope.pack does
            raise type(exc)(f"sample {i}: {exc}") from exc
    return out


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
    positions: the arrays of a :class:`~mrope.packing.ShardedRow`, without its vision map.

    Returns:
        ``input_ids``, ``position_ids`` (``[1 + A, L_r]``), ``mm_token_type_ids``, ``labels`` (shifted),
        ``token_index``, ``cu_seqlens_padded`` and ``max_seqlen``.

    Raises:
        PackingError: a bad split or no samples; the builder's errors name the sample.
    """
    check_split(world_size, rank, layout)
    items = _samples(list(samples), model, rules, tokenizer, convention)
    if not items:
        raise PackingError(
            "shard_samples needs at least one sample (a row's segment lists or Positions); got none"
        )
    split = split_of(np.array([s.num_tokens for s in items], dtype=np.int64), world_size, rank, layout, width)
    n, total = len(items), int(split.count.sum())
    # one column more: a range's label token is written past it, then read, then overwritten
    pos = np.empty((1 + items[0].axes, total + 1), dtype=items[0].dtype)
    ids = np.empty(total + 1, dtype=np.int64)
    types = np.zeros(total + 1, dtype=np.int64)
    deltas = np.zeros(n, dtype=pos.dtype)
    after = np.zeros(len(split.segment), dtype=np.int64)  # the token after each range: its last label
    body = pos[1:]
    for k, (g, lo, real, at) in enumerate(
        zip(
            split.segment.tolist(),
            split.first.tolist(),
            split.real.tolist(),
            split.local.tolist(),
            strict=True,
        )
    ):
        if g == n:
            continue
        length = int(split.lengths[g])
        lo = min(lo, length)
        end = min(lo + real + 1, length) - lo + at  # one more: the label of the range's last token
        deltas[g] = items[g].fill(body[:, at:end], ids[at:end], types[at : at + real], lo, lo + end - at)
        after[k] = ids[at + real]
    labels = ids[1:].copy()
    last = split.local + split.real - 1
    labels[last[split.real > 0]] = after[split.real > 0]
    pos[0] = np.arange(total + 1, dtype=np.int64) - np.repeat(
        np.append(split.local - split.first, 0), np.append(split.count, 1)
    )
    pos, ids, types = np.ascontiguousarray(pos[:, :total]), ids[:total], types[:total]
    out = {"input_ids": ids, "position_ids": pos, "mm_token_type_ids": types, "labels": labels}
    fill_padding(split, out, deltas, pad_token_id)
    return out


__all__ = ["shard_samples"]
