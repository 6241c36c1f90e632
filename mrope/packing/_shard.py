"""One rank's share of a packed row under context parallelism (zigzag) or sequence parallelism (contiguous).

``"zigzag"`` is TransformerEngine's THD split: every sample is padded to a multiple of ``2 * world_size``
and cut into ``2 * world_size`` equal chunks; rank ``r`` keeps chunks ``r`` and ``2 * world_size - 1 - r``
of each sample, sample after sample (TransformerEngine
transformer_engine/common/fused_attn/context_parallel.cu:83-106 at 045b848, ``thd_partition_indices_kernel``:
local token ``t`` of a sequence whose local length is ``s`` reads global token
``t + (r if t < s / 2 else 2 * world_size - 2 - r) * s / 2`` past the sequence's padded start).
``"contiguous"`` is DeepSpeed-Ulysses' split: the row is padded to a multiple of ``world_size`` (the
padding a segment of its own) and rank ``r`` keeps slice ``r``.

A shard reads its tokens out of the built row with a few vectorized gathers: its cost is its own tokens
plus a pass over the row's sample boundaries and vision spans, not the row's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mrope._errors import PackingError
from mrope._positions import SPAN_TYPES, Positions, continued
from mrope.packing._rows import PackedRow, cu_seqlens
from mrope.packing._support import IGNORE_INDEX

if TYPE_CHECKING:
    import torch

SHARD_LAYOUTS: tuple[str, ...] = ("zigzag", "contiguous")
"""The shard layouts :func:`shard` takes."""


@dataclass(frozen=True, eq=False)
class ShardedRow:
    """The ``L_r`` tokens one rank holds of a packed row padded to ``L_pad`` tokens.

    Attributes:
        input_ids: int64 ``[L_r]`` (padding holds ``pad_token_id``).
        position_ids: ``[1 + A, L_r]``, the row's dtype: the text row, then the M-RoPE rows of exactly
            these tokens. Zigzag padding continues its sample (text row ``n_i, n_i + 1, ...``, M-RoPE rows
            ``i + delta``); the contiguous layout's padding is a segment of its own (``0, 1, ...``).
        mm_token_type_ids: int64 ``[L_r]`` (0 text and padding, 1 image, 2 video).
        labels: int64 ``[L_r]``, already shifted: the token each local token predicts (the next token of
            its sample), ``-100`` at each sample's last token and at padding. Give them to the loss as
            transformers' ``shift_labels``: a rank cannot shift them itself.
        token_index: int64 ``[L_r]``, each token's index in the padded global row.
        cu_seqlens: int32 ``[n + 1]``, the samples' real boundaries in the unpadded row.
        cu_seqlens_padded: int32 ``[m + 1]``, the segments' boundaries in the padded global row
            (TransformerEngine's ``cu_seqlens_q_padded``): ``m = n`` for zigzag; for contiguous the
            padding, when there is any, is segment ``n``.
        max_seqlen: the longest padded segment.
        vision_item: int64 ``[L_r]``: the image (``mm_token_type_ids == 1``) or video (``== 2``) each
            token belongs to, one per ``Image`` / ``Video`` segment of the samples, in row order (for most
            families also its row of ``row.image_grid_thw`` / ``video_grid_thw``; MiniCPM-V reports one
            grid per video frame); -1 for text.
        vision_index: int64 ``[L_r]``: the token's index among the row's merged image (or video) tokens,
            i.e. its row of the vision encoder's output for the whole row; -1 for text.
        world_size, rank, layout: the split.
        row: the :class:`mrope.packing.PackedRow` sharded (its grids, samples and deltas).
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    mm_token_type_ids: np.ndarray
    labels: np.ndarray
    token_index: np.ndarray
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    max_seqlen: int
    vision_item: np.ndarray
    vision_index: np.ndarray
    world_size: int
    rank: int
    layout: str
    row: PackedRow

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def images(self) -> np.ndarray:
        """int64 ``[k]``: the row's images (row order) with at least one token on this rank."""
        return np.unique(self.vision_item[self.mm_token_type_ids == 1])

    @property
    def videos(self) -> np.ndarray:
        """int64 ``[k]``: the row's videos (row order) with at least one token on this rank."""
        return np.unique(self.vision_item[self.mm_token_type_ids == 2])

    def model_inputs(self, model: torch.nn.Module | None = None) -> dict[str, Any]:
        """Torch keyword arguments of this rank's forward (batch 1, no attention mask, no cache):
        ``input_ids [1, L_r]``, ``position_ids [1 + A, 1, L_r]``, ``mm_token_type_ids [1, L_r]``, the
        row's grids and ``use_cache=False``; named as ``model.forward`` takes them when a model is given.
        The attention across ranks (and the vision features, see :attr:`vision_index`) are the
        trainer's: the text row alone does not keep a rank's chunks apart."""
        from mrope.packing._inputs import packed_inputs

        return packed_inputs(
            self.input_ids[None],
            self.position_ids[:, None],
            self.mm_token_type_ids[None],
            self.cu_seqlens_padded,
            self.max_seqlen,
            self.row.sequences,
            model,
            seq_lens=False,
            packed_input=self.row.packed_input,
            family=self.row.family,
        )


def check_split(world_size: Any, rank: Any, layout: Any) -> None:
    """Raises PackingError unless ``world_size >= 1``, ``0 <= rank < world_size`` and ``layout`` is known."""
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise PackingError(f"world_size must be an int >= 1; got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise PackingError(f"rank must be an int in [0, {world_size}); got {rank!r}")
    if layout not in SHARD_LAYOUTS:
        raise PackingError(f"layout must be one of {list(SHARD_LAYOUTS)}; got {layout!r}")


def ranges(starts: np.ndarray, counts: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """int64 ``[sum(counts)]``: ``starts[j], starts[j] + 1, ...`` (``counts[j]`` of them), one after another.

    With ``out`` (int64 ``[sum(counts)]``) they are written there as the running sum of steps (1, and at
    each range's first token the jump from the previous range's last): no temporary of the output's size.
    """
    ends = np.cumsum(counts)
    if out is None:
        return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(
            starts - ends + counts, counts
        )
    busy = counts > 0
    heads, first, size = (ends - counts)[busy], starts[busy], counts[busy]
    out.fill(1)
    if len(heads):
        out[heads] = np.diff(first, prepend=0) - np.concatenate([[0], size[:-1] - 1])
        np.cumsum(out, out=out)
    return out


def _pieces(
    padded: np.ndarray, world_size: int, rank: int, layout: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This rank's token ranges in local order: ``(segment, first offset in it, tokens)``, each ``[m]``
    (segment ``n``, past the samples: the contiguous layout's padding). Vectorized over the segments."""
    if layout == "zigzag":
        chunk = padded // (2 * world_size)
        segment = np.repeat(np.arange(len(padded)), 2)
        first = np.stack([rank * chunk, (2 * world_size - 1 - rank) * chunk], axis=1).reshape(-1)
        return segment, first, chunk[segment]
    starts = np.concatenate([[0], np.cumsum(padded)])
    width = int(starts[-1]) // world_size
    lo, hi = rank * width, (rank + 1) * width
    segment = np.arange(
        np.searchsorted(starts, lo, side="right") - 1, np.searchsorted(starts, hi, side="left")
    )
    first = np.maximum(starts[segment], lo) - starts[segment]
    return segment, first, np.minimum(starts[segment + 1], hi) - starts[segment] - first


def vision_spans(sequences: Sequence[Positions], starts: np.ndarray) -> np.ndarray:
    """int64 ``[S, 5]``: the vision spans of ``sequences`` (starting at ``starts`` in the row) in row
    order: start in the row, item (image or video index in row order, one per segment), the row index
    of its first merged token among its kind's, its kind (1 image, 2 video), its tokens."""
    rows, items, tokens = [], [0, 0, 0], [0, 0, 0]
    kinds = SPAN_TYPES.get
    for p, offset in zip(sequences, starts.tolist(), strict=True):
        if not (len(p.image_grid_thw) or len(p.video_grid_thw)):
            continue
        last = [-1, -1, -1]  # segment index of each kind's previous span: an item's spans follow each other
        for name, start, stop, segment, _, _ in p.spans:
            kind = kinds(name)
            if kind is None:
                continue
            if segment != last[kind]:
                last[kind] = segment
                items[kind] += 1
            rows.append((offset + start, items[kind] - 1, tokens[kind], kind, stop - start))
            tokens[kind] += stop - start
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def vision_map(spans: np.ndarray, at: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(item, index)``, int64 ``[L]`` each, of tokens at ``at`` ``[L]`` (row coordinates of ``spans``,
    :func:`vision_spans`) of modality ``types`` ``[L]``: the image or video each vision token belongs
    to and its index among its kind's merged tokens; -1 at text."""
    item = np.full(at.size, -1, dtype=np.int64)
    index = np.full(at.size, -1, dtype=np.int64)
    vision = np.flatnonzero(types)
    if vision.size:
        g = at[vision]
        which = spans[np.searchsorted(spans[:, 0], g, side="right") - 1]
        item[vision] = which[:, 1]
        index[vision] = which[:, 2] + g - which[:, 0]
    return item, index


def layout_unit(world_size: int, layout: str) -> int:
    """What a ``layout`` row pads to a multiple of: ``2 * world_size`` per sample (zigzag), ``world_size``
    for the row (contiguous)."""
    return 2 * world_size if layout == "zigzag" else world_size


def split_sizes(lengths: np.ndarray, world_size: int, layout: str, width: int = 0) -> np.ndarray:
    """int64 ``[m]``: the padded segments of a row of samples of ``lengths`` tokens: zigzag pads each
    sample to a multiple of ``2 * world_size``, contiguous pads the row to a multiple of ``world_size``;
    then the row is padded up to ``width`` (when it is shorter) by one more segment, the row's padding.

    Raises:
        PackingError: ``width`` is not a multiple of the layout's unit (``2 * world_size`` or ``world_size``).
    """
    unit = layout_unit(world_size, layout)
    if width % unit:
        raise PackingError(
            f"a {layout} row of world size {world_size} pads to a multiple of {unit}; got {width}"
        )
    padded = -(-lengths // unit) * unit if layout == "zigzag" else lengths
    total = int(padded.sum())
    tail = max(width, -(-total // unit) * unit) - total
    return np.concatenate([padded, [tail]]).astype(np.int64) if tail else padded.astype(np.int64)


class Split(NamedTuple):
    """A rank's token ranges of a row of samples of ``lengths`` tokens (see :func:`split_of`), each
    ``[m]`` in local order: ``segment`` (``n``, past the samples: the contiguous layout's padding),
    ``first`` (its first offset in the segment), ``count`` (tokens), ``real`` (those that are the
    sample's, not padding), ``local`` (where it starts on the rank); ``padded`` ``[m']`` the padded
    segments."""

    lengths: np.ndarray
    padded: np.ndarray
    segment: np.ndarray
    first: np.ndarray
    count: np.ndarray
    real: np.ndarray
    local: np.ndarray


def split_of(lengths: np.ndarray, world_size: int, rank: int, layout: str, width: int = 0) -> Split:
    """Rank ``rank``'s :class:`Split` of a row of samples of ``lengths`` (int64 ``[n]``) tokens, padded
    to ``width`` tokens at least; vectorized over the segments."""
    padded = split_sizes(lengths, world_size, layout, width)
    segment, first, count = _pieces(padded, world_size, rank, layout)
    real = np.clip(np.concatenate([lengths, [0]])[segment] - first, 0, count)
    return Split(lengths, padded, segment, first, count, real, np.cumsum(count) - count)


def token_index(split: Split, out: np.ndarray | None = None) -> np.ndarray:
    """int64 ``[L_r]``: each of the rank's tokens' index in the padded global row (written to ``out``
    when given)."""
    padded_starts = np.concatenate([[0], np.cumsum(split.padded)]).astype(np.int64)
    return ranges(padded_starts[split.segment] + split.first, split.count, out)


def fill_padding(
    split: Split,
    out: dict[str, Any],
    deltas: np.ndarray,
    pad_token_id: int,
) -> None:
    """Write the padding of a rank's ``out`` arrays (``input_ids``, ``position_ids``,
    ``mm_token_type_ids``, ``labels``, the samples' tokens already in place) and ``-100`` at each
    sample's last token; add ``token_index`` (written into ``out["token_index"]`` when that is there),
    ``cu_seqlens_padded`` and ``max_seqlen``."""
    segment, first, count, real, local = split.segment, split.first, split.count, split.real, split.local
    n = len(split.lengths)
    pads = ranges(local + real, count - real)
    pad_offset = ranges(first + real, count - real)
    pad_segment = np.repeat(segment, count - real)
    pos = out["position_ids"]
    out["input_ids"][pads] = pad_token_id
    out["mm_token_type_ids"][pads] = 0
    pos[:, pads] = pad_offset  # the row's padding: 0, 1, ... on every row; a sample's: its text row
    tail = pad_segment < n  # a sample's padding continues it, as decode would (Positions.window)
    pos[1:, pads[tail]] = continued(pad_offset[tail], deltas[pad_segment[tail]])
    labels = out["labels"]
    labels[pads] = IGNORE_INDEX
    ends = (real > 0) & (first + real == np.concatenate([split.lengths, [0]])[segment])  # a sample's last
    labels[(local + real - 1)[ends]] = IGNORE_INDEX
    out["token_index"] = token_index(split, out.get("token_index"))
    out["cu_seqlens_padded"] = cu_seqlens(split.padded.tolist())
    out["max_seqlen"] = int(split.padded.max()) if len(split.padded) else 0


def shard_arrays(
    input_ids: np.ndarray,
    position_ids: np.ndarray,
    mm_token_type_ids: np.ndarray,
    labels: np.ndarray,
    row_cu_seqlens: np.ndarray,
    deltas: np.ndarray,
    *,
    world_size: int,
    rank: int,
    layout: str,
    width: int = 0,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """One rank's arrays of a packed row given as plain arrays (``[L]`` ids, types and unshifted labels,
    ``[1 + A, L]`` positions, ``[n + 1]`` sample boundaries, ``[n]`` decode deltas), the row padded to
    ``width`` tokens at least (see :func:`split_sizes`).

    Returns:
        ``input_ids``, ``position_ids``, ``mm_token_type_ids``, ``labels`` (shifted), ``token_index``,
        ``cu_seqlens_padded``, ``max_seqlen`` as :class:`ShardedRow` has them, and ``source``: int64
        ``[L_r]``, each token's index in the unpadded row (padding: a neighbour's).
    """
    split = split_of(np.diff(row_cu_seqlens).astype(np.int64), world_size, rank, layout, width)
    total = int(input_ids.shape[0])
    real_starts = np.concatenate([row_cu_seqlens.astype(np.int64), [total]])  # the row's padding: after it
    segment = split.segment
    at = ranges(real_starts[segment] + split.first, split.count)  # in the unpadded row
    src = np.minimum(at, total - 1)
    out = {
        "input_ids": input_ids.take(src),
        "position_ids": position_ids.take(src, axis=1),
        "mm_token_type_ids": mm_token_type_ids.take(src),
        "labels": labels.take(np.minimum(at + 1, total - 1)).astype(np.int64),
    }
    fill_padding(split, out, deltas, pad_token_id)
    out["source"] = at
    return out


def shard(
    row: PackedRow,
    *,
    world_size: int,
    rank: int,
    layout: str = "zigzag",
    labels: np.ndarray | None = None,
    pad_token_id: int = 0,
) -> ShardedRow:
    """The tokens rank ``rank`` of ``world_size`` holds of ``row``, with their own positions.

    Args:
        row: a packed row (:func:`mrope.pack`).
        world_size, rank: the context- (or sequence-) parallel group's size and this rank.
        layout: ``"zigzag"`` (TransformerEngine / Megatron-Core context parallelism, the default) or
            ``"contiguous"`` (DeepSpeed-Ulysses sequence parallelism); see :mod:`mrope.packing._shard`.
        labels: int ``[L]``, the row's labels in transformers' unshifted form (``-100`` skipped); default
            the row's ``input_ids``. Each local token gets the label of the token after it in its sample.
        pad_token_id: ``input_ids`` of padding tokens.

    Returns:
        a :class:`ShardedRow` of ``L_pad / world_size`` tokens.

    Raises:
        PackingError: not a packed row, a bad world size, rank or layout, or labels of the wrong length.
    """
    check_split(world_size, rank, layout)
    if not isinstance(row, PackedRow):
        raise PackingError(f"shard takes a PackedRow (from mrope.pack); got {type(row).__name__}")
    labels = np.asarray(row.input_ids if labels is None else labels)
    if labels.shape != (row.num_tokens,):
        raise PackingError(
            f"labels must be [{row.num_tokens}] (one per token of the row); got {list(labels.shape)}"
        )
    out = shard_arrays(
        row.input_ids,
        row.position_ids,
        row.mm_token_type_ids,
        labels,
        row.cu_seqlens,
        row.deltas,
        world_size=int(world_size),
        rank=int(rank),
        layout=layout,
        pad_token_id=pad_token_id,
    )
    at, types = out.pop("source"), out["mm_token_type_ids"]
    spans = vision_spans(row.sequences, row.cu_seqlens[:-1]) if types.any() else np.zeros((0, 5), np.int64)
    item, index = vision_map(spans, at, types)
    return ShardedRow(
        **out,
        cu_seqlens=row.cu_seqlens,
        vision_item=item,
        vision_index=index,
        world_size=int(world_size),
        rank=int(rank),
        layout=layout,
        row=row,
    )


__all__ = [
    "SHARD_LAYOUTS",
    "ShardedRow",
    "Split",
    "check_split",
    "fill_padding",
    "layout_unit",
    "ranges",
    "shard",
    "shard_arrays",
    "split_of",
    "split_sizes",
    "token_index",
    "vision_map",
    "vision_spans",
]
