"""Packed rows: many samples in one row, no padding, each sample's positions its own (``mrope.pack``).

A row's ``position_ids`` has ``1 + A`` rows: row 0 the text row, counting ``0 .. n_i - 1`` within each
sample (transformers reads the sample boundaries from it), rows ``1 .. A`` each sample's positions exactly
as :func:`mrope.build_positions` gives it alone. The coordinates all come from the builder; this module
only lays finished samples side by side.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope._builder import build_positions
from mrope._errors import MRopeError, PackingError
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope.models import ModelLike, get_family, resolve_rules, resolve_tokenizer
from mrope.packing._bins import MODES, check_max_length, efficiency, first_fit_decreasing, stream_rows

if TYPE_CHECKING:
    import torch


def text_row(lengths: Sequence[int], dtype: Any = np.int64) -> np.ndarray:
    """``[sum(lengths)]``: ``0 .. n_i - 1`` for each length in turn (the text row of a packed row)."""
    total = int(sum(lengths))
    starts = np.repeat(np.cumsum([0, *lengths[:-1]]), lengths) if len(lengths) else np.zeros(0, np.int64)
    return (np.arange(total, dtype=np.int64) - starts).astype(dtype, copy=False)


def cu_seqlens(lengths: Sequence[int]) -> np.ndarray:
    """int32 ``[n + 1]``: ``0`` then the running sum of ``lengths`` (flash-attention's boundaries)."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def stack_positions(ids: Sequence[np.ndarray]) -> np.ndarray:
    """``[1 + A, L]``: the text row over the samples' ``[A, n_i]`` positions laid side by side."""
    lengths = [int(a.shape[1]) for a in ids]
    body = np.concatenate(ids, axis=1)
    return np.concatenate([text_row(lengths, body.dtype)[None], body])


@dataclass(frozen=True, eq=False)
class PackedRow:
    """One packed row of ``L`` tokens holding ``n`` samples.

    Attributes:
        input_ids: int64 ``[L]``.
        position_ids: ``[1 + A, L]`` (int64; float32 for fractional time): the text row, then the
            samples' own positions.
        mm_token_type_ids: int64 ``[L]`` (0 text, 1 image, 2 video).
        cu_seqlens: int32 ``[n + 1]``, the sample boundaries; ``max_seqlen`` the longest sample.
        samples: indices of the input samples, in row order.
        deltas: ``[n]``, each sample's decode delta (its positions continue at ``i + delta``).
        sequences: each sample's :class:`mrope.Positions`, in row order.
        packed_input: how the family's transformers model takes packed rows (see
            :data:`mrope.packing.PACKED_INPUT`); ``family`` names it in errors.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    mm_token_type_ids: np.ndarray
    cu_seqlens: np.ndarray
    max_seqlen: int
    samples: tuple[int, ...]
    deltas: np.ndarray
    sequences: tuple[Positions, ...]
    packed_input: str = "text-row"
    family: str = ""

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def image_grid_thw(self) -> np.ndarray:
        """int64 ``[n_images, 3]``, the samples' image grids in row order."""
        return np.concatenate([p.image_grid_thw for p in self.sequences]).reshape(-1, 3)

    @property
    def video_grid_thw(self) -> np.ndarray:
        """int64 ``[n_videos, 3]``, the samples' video grids in row order."""
        return np.concatenate([p.video_grid_thw for p in self.sequences]).reshape(-1, 3)

    @property
    def second_per_grid_ts(self) -> np.ndarray:
        """float64 ``[n_videos]`` in row order."""
        return np.concatenate([p.second_per_grid_ts for p in self.sequences])

    @property
    def audio_tokens(self) -> np.ndarray:
        """int64 ``[n_audios]``: each audio clip's tokens, in row order (rules with audio)."""
        return np.concatenate([p.audio_tokens for p in self.sequences]).astype(np.int64)

    def model_inputs(self, model: torch.nn.Module | None = None, *, seq_lens: bool = True) -> dict[str, Any]:
        """Torch keyword arguments for a transformers forward of this row (batch 1, no attention mask):
        ``input_ids [1, L]``, ``position_ids [1 + A, 1, L]``, ``mm_token_type_ids [1, L]``, the grids,
        and with ``seq_lens`` ``cu_seq_lens_q/k`` and ``max_length_q/k``. See
        :func:`mrope.packing._inputs.packed_inputs`."""
        from mrope.packing._inputs import packed_inputs

        return packed_inputs(
            self.input_ids[None],
            self.position_ids[:, None],
            self.mm_token_type_ids[None],
            self.cu_seqlens,
            self.max_seqlen,
            self.sequences,
            model,
            seq_lens=seq_lens,
            packed_input=self.packed_input,
            family=self.family,
        )


@dataclass(frozen=True, eq=False)
class PaddedPack:
    """Packed rows padded to one length, for a batch of several rows: the padding of each row is a
    segment of its own (its text row restarts at 0, ``input_ids`` hold ``pad_token_id``), so it is kept
    apart from the samples as they are from each other, and ``cu_seqlens`` covers it.

    Attributes:
        input_ids: int64 ``[R, L]``; ``position_ids`` ``[1 + A, R, L]``; ``mm_token_type_ids`` ``[R, L]``.
        is_sample: bool ``[R, L]``: True at sample tokens, False at padding (ignore its labels).
        cu_seqlens: int32: the boundaries of every sample and padding segment of the ``R * L`` tokens
            read row after row; ``max_seqlen`` the longest segment.
        rows: the :class:`PackedRow` values padded (grids, samples and deltas in row order).
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    mm_token_type_ids: np.ndarray
    is_sample: np.ndarray
    cu_seqlens: np.ndarray
    max_seqlen: int
    rows: tuple[PackedRow, ...]

    def model_inputs(self, model: torch.nn.Module | None = None, *, seq_lens: bool = True) -> dict[str, Any]:
        """As :meth:`PackedRow.model_inputs`, for ``R`` rows (``[R, L]`` ids, ``[1 + A, R, L]`` positions)."""
        from mrope.packing._inputs import packed_inputs

        first = self.rows[0]
        return packed_inputs(
            self.input_ids,
            self.position_ids,
            self.mm_token_type_ids,
            self.cu_seqlens,
            self.max_seqlen,
            tuple(p for row in self.rows for p in row.sequences),
            model,
            seq_lens=seq_lens,
            packed_input=first.packed_input,
            family=first.family,
        )


def padded_arrays(
    input_ids: Sequence[np.ndarray],
    position_ids: Sequence[np.ndarray],
    segments: Sequence[Sequence[int]],
    width: int,
    pad_token_id: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Rows of ``input_ids [L_r]`` and ``position_ids [1 + A, L_r]`` (holding segments of the given
    lengths) padded to ``width``, the padding of each row a segment of its own (positions ``0 .. p - 1``
    on every row): ``(input_ids [R, W], position_ids [1 + A, R, W], is_sample [R, W], cu_seqlens, max_seqlen)``,
    ``cu_seqlens`` over the ``R * W`` tokens read row after row."""
    longest = max(int(ids.shape[0]) for ids in input_ids)
    if width < longest:
        raise PackingError(f"cannot pad to length {width}: the longest row has {longest} tokens")
    first = position_ids[0]
    out_pos = np.empty((first.shape[0], len(input_ids), width), dtype=first.dtype)
    ids = np.full((len(input_ids), width), pad_token_id, dtype=np.int64)
    is_sample = np.zeros((len(input_ids), width), dtype=bool)
    lengths: list[int] = []
    for r, (row_ids, row_pos, row_segments) in enumerate(zip(input_ids, position_ids, segments, strict=True)):
        n = int(row_ids.shape[0])
        if row_pos.shape[0] != first.shape[0] or row_pos.dtype != first.dtype:
            raise PackingError("rows of different position layouts (axes or dtype) cannot share a batch")
        out_pos[:, r, :n] = row_pos
        out_pos[:, r, n:] = np.arange(width - n, dtype=first.dtype)
        ids[r, :n] = row_ids
        is_sample[r, :n] = True
        lengths.extend(int(k) for k in row_segments)
        if n < width:
            lengths.append(width - n)
    return ids, out_pos, is_sample, cu_seqlens(lengths), max(lengths)


def pad_rows(rows: Sequence[PackedRow], length: int | None = None, pad_token_id: int = 0) -> PaddedPack:
    """Rows padded to ``length`` (default: the longest), the padding a segment of its own."""
    if not rows:
        raise PackingError("pad_rows needs at least one row")
    width = max(r.num_tokens for r in rows) if length is None else length
    ids, pos, is_sample, cu, longest = padded_arrays(
        [r.input_ids for r in rows],
        [r.position_ids for r in rows],
        [np.diff(r.cu_seqlens) for r in rows],
        width,
        pad_token_id,
    )
    types = np.zeros(ids.shape, dtype=np.int64)
    for r, row in enumerate(rows):
        types[r, : row.num_tokens] = row.mm_token_type_ids
    return PaddedPack(
        input_ids=ids,
        position_ids=pos,
        mm_token_type_ids=types,
        is_sample=is_sample,
        cu_seqlens=cu,
        max_seqlen=longest,
        rows=tuple(rows),
    )


@dataclass(frozen=True, eq=False)
class PackedBatch:
    """What :func:`pack` returns: the rows, and how full they are.

    Attributes:
        rows: the :class:`PackedRow` values (iterate, index or ``len()`` the batch itself).
        max_length: the row capacity packed to.
    """

    rows: tuple[PackedRow, ...]
    max_length: int

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[PackedRow]:
        return iter(self.rows)

    def __getitem__(self, index: int) -> PackedRow:
        return self.rows[index]

    @property
    def num_tokens(self) -> int:
        return sum(r.num_tokens for r in self.rows)

    @property
    def efficiency(self) -> float:
        """Packing efficiency: tokens / (rows x max_length)."""
        return efficiency(self.num_tokens, len(self.rows), self.max_length)

    def padded(self, *, length: int | None = None, pad_token_id: int = 0) -> PaddedPack:
        """All rows as one padded batch (``length`` defaults to the longest row); see :class:`PaddedPack`."""
        return pad_rows(self.rows, length, pad_token_id)

    def __repr__(self) -> str:
        samples = sum(len(r.samples) for r in self.rows)
        return (
            f"PackedBatch({samples} samples in {len(self.rows)} rows of <= {self.max_length} tokens, "
            f"efficiency {self.efficiency:.3f})"
        )


def make_row(
    indices: Sequence[int], sequences: Sequence[Positions], packed_input: str, family: str
) -> PackedRow:
    """One :class:`PackedRow` of finished samples (their input indices and :class:`Positions`), in order."""
    lengths = [p.num_tokens for p in sequences]
    head = sequences[0].ids
    total = sum(lengths)
    position_ids = np.empty((head.shape[0] + 1, total), dtype=head.dtype)
    input_ids = np.empty(total, dtype=np.int64)
    types = np.empty(total, dtype=np.int64)
    ramp = np.arange(max(lengths), dtype=head.dtype)
    start = 0
    for i, p, n in zip(indices, sequences, lengths, strict=True):
        if p.ids.shape[0] != head.shape[0] or p.ids.dtype != head.dtype:
            raise PackingError(
                f"sample {i}: {p.ids.shape[0]} axes of {p.ids.dtype}, but sample {indices[0]} has "
                f"{head.shape[0]} of {head.dtype}: one row holds samples of one layout"
            )
        stop = start + n
        position_ids[0, start:stop] = ramp[:n]  # the text row: 0 .. n - 1 within the sample
        position_ids[1:, start:stop] = p.ids
        input_ids[start:stop] = p.input_ids
        types[start:stop] = p.mm_token_type_ids
        start = stop
    return PackedRow(
        input_ids=input_ids,
        position_ids=position_ids,
        mm_token_type_ids=types,
        cu_seqlens=cu_seqlens(lengths),
        max_seqlen=max(lengths),
        samples=tuple(int(i) for i in indices),
        deltas=np.asarray([p.delta for p in sequences], dtype=head.dtype),
        sequences=tuple(sequences),
        packed_input=packed_input,
        family=family,
    )


class _Builder:
    """Turns each sample (a segment list or a finished :class:`Positions`) into :class:`Positions`, with
    the rules resolved once, on the first segment list."""

    def __init__(self, model: Any, rules: Any, tokenizer: Any, convention: str) -> None:
        self.model, self.rules, self.convention = model, rules, convention
        self.tokenizer = resolve_tokenizer(model, tokenizer) if model is not None else tokenizer
        self.lay: LayoutRules | None = None
        family = get_family(model) if model is not None else None
        self.packed_input = family.packed_input if family is not None else "text-row"
        self.family = family.name if family is not None else ""

    def __call__(self, index: int, sample: Any) -> Positions:
        if isinstance(sample, Positions):
            return sample
        if self.lay is None:
            self.lay = resolve_rules(self.model, self.rules, self.convention)
        try:
            return build_positions(sample, rules=self.lay, tokenizer=self.tokenizer)
        except MRopeError as exc:  # name the sample: the builder's error does not know its index
            raise type(exc)(f"sample {index}: {exc}") from exc


def pack(
    samples: Iterable[Sequence[Any] | Positions],
    *,
    model: ModelLike | None = None,
    max_length: int,
    tokenizer: Any = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    convention: str = "released",
    mode: str = "ffd",
    open_rows: int = 8,
) -> PackedBatch | Iterator[PackedRow]:
    """Pack samples into rows of at most ``max_length`` tokens, padding-free, each sample's positions its own.

    Args:
        samples: segment lists (as :func:`mrope.build_batch` takes) or :class:`mrope.Positions` (mixed is
            fine); a list for ``"ffd"``, any iterable (a generator) for ``"stream"``.
        model, tokenizer, rules, convention: as :func:`mrope.build_positions` (``model`` may be omitted
            when every sample is a :class:`Positions`, or ``rules`` is a full :class:`LayoutRules`).
        max_length: row capacity in tokens. A longer sample is a :class:`~mrope._errors.PackingError`
            naming its index and length: samples are never cut (a vision block must stay whole).
        mode: ``"ffd"`` (first-fit-decreasing, the default: fewest rows) returns a :class:`PackedBatch`;
            ``"stream"`` (order-keeping, at most ``open_rows`` rows held) returns an iterator of
            :class:`PackedRow`, each as soon as it is closed.

    Returns:
        a :class:`PackedBatch` (``"ffd"``) or an iterator of :class:`PackedRow` (``"stream"``).
    """
    if mode not in MODES:
        raise PackingError(f"mode must be one of {list(MODES)}; got {mode!r}")
    check_max_length(max_length)
    build = _Builder(model, rules, tokenizer, convention)
    if mode == "stream":
        return _stream(samples, build, max_length, open_rows)
    if isinstance(samples, (str, bytes, Positions)) or not isinstance(samples, Iterable):
        raise PackingError(f"pack takes a list of samples; got {type(samples).__name__}")
    sequences = [build(i, s) for i, s in enumerate(samples)]
    bins = first_fit_decreasing([p.num_tokens for p in sequences], max_length)
    rows = tuple(
        make_row(sorted(b), [sequences[i] for i in sorted(b)], build.packed_input, build.family) for b in bins
    )
    return PackedBatch(rows=rows, max_length=max_length)


def _stream(samples: Iterable[Any], build: _Builder, max_length: int, open_rows: int) -> Iterator[PackedRow]:
    held: dict[int, Positions] = {}

    def lengths() -> Iterator[tuple[int, int]]:
        for i, sample in enumerate(samples):
            p = held[i] = build(i, sample)
            yield i, p.num_tokens

    for indices, _ in stream_rows(lengths(), max_length, open_rows=open_rows):
        yield make_row(indices, [held.pop(i) for i in indices], build.packed_input, build.family)


__all__ = [
    "PackedBatch",
    "PackedRow",
    "PaddedPack",
    "cu_seqlens",
    "make_row",
    "pack",
    "pad_rows",
    "padded_arrays",
    "stack_positions",
    "text_row",
]
