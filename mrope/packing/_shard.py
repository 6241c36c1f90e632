"""One rank's share of a packed row under context parallelism (zigzag) or sequence parallelism (contiguous).

``"zigzag"`` is TransformerEngine's THD split: every sample is padded to a multiple of ``2 * world_size``
and cut into ``2 * world_size`` equal chunks; rank ``r`` keeps chunks ``r`` and ``2 * world_size - 1 - r``
of each sample, sample after sample (TransformerEngine
transformer_engine/common/fused_attn/context_parallel.cu:83-106 at 045b848, ``thd_partition_indices_kernel``:
local token ``t`` of a sequence whose local length is ``s`` reads global token
``t + (r if t < s / 2 else 2 * world_size - 2 - r) * s / 2`` past the sequence's padded start).
``"contiguous"`` is DeepSpeed-Ulysses' split: the row is padded to a multiple of ``world_size`` (the
padding a segment of its own) and rank ``r`` keeps slice ``r``.

A shard is made from the row's samples one token range at a time (:meth:`mrope.Positions.window` for
positions, the spans for the vision map), so its cost is its own tokens plus the row's sample and span
count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope._errors import PackingError
from mrope._positions import Positions
from mrope.packing._rows import PackedRow, cu_seqlens
from mrope.packing._support import IGNORE_INDEX

if TYPE_CHECKING:
    import torch

SHARD_LAYOUTS: tuple[str, ...] = ("zigzag", "contiguous")
"""The shard layouts :func:`shard` takes."""

_VISION_KINDS = {"image": 1, "thumbnail": 1, "video": 2}
"""Span kind -> modality (1 image, 2 video), as :attr:`mrope.Positions.mm_token_type_ids` counts them."""


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
            token belongs to, indexed in the row's order (``row.image_grid_thw`` / ``video_grid_thw``);
            -1 for text.
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


def _check(row: Any, world_size: Any, rank: Any, layout: Any) -> None:
    if not isinstance(row, PackedRow):
        raise PackingError(f"shard takes a PackedRow (from mrope.pack); got {type(row).__name__}")
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise PackingError(f"world_size must be an int >= 1; got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise PackingError(f"rank must be an int in [0, {world_size}); got {rank!r}")
    if layout not in SHARD_LAYOUTS:
        raise PackingError(f"layout must be one of {list(SHARD_LAYOUTS)}; got {layout!r}")


def _pieces(padded: np.ndarray, world_size: int, rank: int, layout: str) -> list:
    """This rank's ``(segment, k0, k1)`` token ranges in local order (segment ``n``: the row's padding)."""
    if layout == "zigzag":
        out = []
        for i, size in enumerate(padded.tolist()):
            chunk = size // (2 * world_size)
            for c in (rank, 2 * world_size - 1 - rank):
                out.append((i, c * chunk, (c + 1) * chunk))
        return out
    starts = np.concatenate([[0], np.cumsum(padded)])
    width = int(starts[-1]) // world_size
    lo, hi = rank * width, (rank + 1) * width
    first = int(np.searchsorted(starts, lo, side="right")) - 1
    out = []
    for j in range(first, len(padded)):
        if starts[j] >= hi:
            break
        out.append(
            (j, max(lo, int(starts[j])) - int(starts[j]), min(hi, int(starts[j + 1])) - int(starts[j]))
        )
    return out


class _VisionSpans:
    """The row's vision spans per sample: start, stop, modality, item and first merged-token index."""

    def __init__(self, sequences: Sequence[Positions]) -> None:
        self.per_sample: list[np.ndarray] = []
        items, tokens = [0, 0, 0], [0, 0, 0]
        for p in sequences:
            rows, seen = [], set()
            for s in p.spans:
                kind = _VISION_KINDS.get(s.kind)
                if kind is None:
                    continue
                if (kind, s.index) not in seen:
                    seen.add((kind, s.index))
                    items[kind] += 1
                rows.append((s.start, s.stop, kind, items[kind] - 1, tokens[kind]))
                tokens[kind] += s.stop - s.start
            self.per_sample.append(np.asarray(rows, dtype=np.int64).reshape(-1, 5))

    def fill(self, sample: int, k0: int, k1: int, item: np.ndarray, index: np.ndarray) -> None:
        """Write ``item`` / ``index`` (``[k1 - k0]``, preset to -1) for tokens ``k0 .. k1 - 1`` of ``sample``."""
        spans = self.per_sample[sample]
        first = int(np.searchsorted(spans[:, 1], k0, side="right"))
        for start, stop, _, it, base in spans[first:].tolist():
            if start >= k1:
                break
            a, b = max(start, k0), min(stop, k1)
            item[a - k0 : b - k0] = it
            index[a - k0 : b - k0] = np.arange(base + a - start, base + b - start)


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
    _check(row, world_size, rank, layout)
    world_size, rank = int(world_size), int(rank)
    lengths = np.diff(row.cu_seqlens).astype(np.int64)
    if labels is None:
        labels = row.input_ids
    labels = np.asarray(labels)
    if labels.shape != (row.num_tokens,):
        raise PackingError(
            f"labels must be [{row.num_tokens}] (one per token of the row); got {list(labels.shape)}"
        )
    if layout == "zigzag":
        padded = -(-lengths // (2 * world_size)) * (2 * world_size)
    else:
        total = int(lengths.sum())
        tail = -(-total // world_size) * world_size - total
        padded = np.concatenate([lengths, [tail]]) if tail else lengths
    pieces = _pieces(padded, world_size, rank, layout)
    return _gather(row, lengths, padded, pieces, labels, pad_token_id, (world_size, rank, layout))


def _gather(
    row: PackedRow,
    lengths: np.ndarray,
    padded: np.ndarray,
    pieces: list,
    labels: np.ndarray,
    pad_token_id: int,
    split: tuple[int, int, str],
) -> ShardedRow:
    """The arrays of the ``(segment, k0, k1)`` pieces, laid one after another."""
    n = len(lengths)
    real_starts = row.cu_seqlens.astype(np.int64)
    padded_starts = np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)
    size = sum(k1 - k0 for _, k0, k1 in pieces)
    axes = row.position_ids.shape[0]
    ids = np.full(size, pad_token_id, dtype=np.int64)
    pos = np.empty((axes, size), dtype=row.position_ids.dtype)
    types = np.zeros(size, dtype=np.int64)
    out_labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
    token_index = np.empty(size, dtype=np.int64)
    item = np.full(size, -1, dtype=np.int64)
    index = np.full(size, -1, dtype=np.int64)
    vision = _VisionSpans(row.sequences) if pieces else None
    a = 0
    for seg, k0, k1 in pieces:
        b = a + k1 - k0
        token_index[a:b] = np.arange(padded_starts[seg] + k0, padded_starts[seg] + k1)
        if seg == n:  # the contiguous layout's padding: a segment of its own
            pos[:, a:b] = np.arange(k0, k1, dtype=pos.dtype)
            a = b
            continue
        p = row.sequences[seg]
        pos[0, a:b] = np.arange(k0, k1, dtype=pos.dtype)
        pos[1:, a:b] = p.window(k0, k1)
        real = max(0, min(k1, int(lengths[seg])) - k0)
        if real:
            g = int(real_starts[seg]) + k0
            ids[a : a + real] = row.input_ids[g : g + real]
            types[a : a + real] = row.mm_token_type_ids[g : g + real]
            last = min(real, int(lengths[seg]) - 1 - k0)  # tokens with a next token in the sample
            if last > 0:
                out_labels[a : a + last] = labels[g + 1 : g + 1 + last]
            vision.fill(seg, k0, k0 + real, item[a : a + real], index[a : a + real])  # type: ignore[union-attr]
        a = b
    world_size, rank, layout = split
    return ShardedRow(
        input_ids=ids,
        position_ids=pos,
        mm_token_type_ids=types,
        labels=out_labels,
        token_index=token_index,
        cu_seqlens=row.cu_seqlens,
        cu_seqlens_padded=cu_seqlens(padded.tolist()),
        max_seqlen=int(padded.max()) if len(padded) else 0,
        vision_item=item,
        vision_index=index,
        world_size=world_size,
        rank=rank,
        layout=layout,
        row=row,
    )


__all__ = ["SHARD_LAYOUTS", "ShardedRow", "shard"]
