"""Packed rows as an Arrow table: samples (positions, labels, or a failure) -> :func:`mrope.pack` -> rows.

The table the pipeline's ``pack_batch`` and ``mrope batch --pack`` give (docs/packing.md); the packing
itself is :func:`mrope.pack`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope import _arrow as arrow
from mrope._errors import PackingError, SampleTooLong
from mrope._positions import Positions
from mrope._result_rows import set_columns
from mrope.packing._bins import check_length, check_max_length, efficiency
from mrope.packing._rows import PackedRow, make_row, pack
from mrope.packing._shard import check_split, shard

if TYPE_CHECKING:
    import pyarrow as pa


PackItem = (
    tuple[Positions, "np.ndarray | None"]
    | tuple[Positions, "np.ndarray | None", "Mapping[str, Positions] | None"]
    | tuple[str, str]
)
"""One sample to pack: its positions and labels (``None`` without labels), and in a job with position
sets every set of it by name (the positions are the first), or the ``(error, error_code)`` of a record
that failed."""

PACKED_COLUMNS = (
    "ids",
    "samples",
    "input_ids",
    "position_ids",
    "mm_token_type_ids",
    "cu_seqlens",
    *arrow.SEQUENCE_COLUMNS,
    *arrow.ERROR_COLUMNS,
)
"""The columns of a packed table (:func:`packed_table`), plus ``labels`` in a job with labels."""

SHARD_COLUMNS = ("rank", "token_index", "cu_seqlens_padded")
"""The columns a packed table cut for context parallelism adds (after the others)."""


def packed_schema(
    *, labels: bool = False, fractional: bool = False, cp: bool = False, sets_dtype: np.dtype | None = None
) -> pa.Schema:
    """The Arrow types of packed rows: ``ids`` (the records' ids) and ``samples`` (their indices) in row
    order, ``input_ids [L]``, ``position_ids [1 + A][L]`` (row 0 the text row), ``mm_token_type_ids [L]``,
    ``cu_seqlens`` int32 ``[n + 1]``, ``num_tokens``, the grids in row order, ``error`` and ``error_code``
    (``""`` on a packed row), ``labels [L]`` with ``labels``, and with ``cp`` :data:`SHARD_COLUMNS`:
    ``rank`` (null on an error row), ``token_index [L_r]`` and ``cu_seqlens_padded`` int32 ``[m + 1]``;
    with ``sets_dtype`` the position set columns (:func:`mrope._arrow.set_fields`, no deltas)."""
    import pyarrow as pa

    cols = [
        ("ids", pa.list_(pa.string())),
        ("samples", pa.list_(pa.int64())),
        ("input_ids", pa.list_(pa.int64())),
        ("position_ids", arrow.positions_type(fractional)),
        ("mm_token_type_ids", pa.list_(pa.int64())),
        ("cu_seqlens", pa.list_(pa.int32())),
        *arrow.sequence_fields(),
        *arrow.error_fields(),
    ]
    if labels:
        cols.append(("labels", pa.list_(pa.int64())))
    if cp:
        cols += [
            ("rank", pa.int64()),
            ("token_index", pa.list_(pa.int64())),
            ("cu_seqlens_padded", pa.list_(pa.int32())),
        ]
    if sets_dtype is not None:
        cols += arrow.set_fields(sets_dtype, deltas=False)
    return pa.schema(cols)


def check_fits(index: int, p: Positions, max_length: int, name: str | None = None) -> None:
    """Raise :class:`SampleTooLong` when sample ``index`` (``name``: its id, in the message) cannot fit
    a packed row of ``max_length``."""
    try:
        check_length(index, p.num_tokens, max_length)
    except PackingError as exc:
        raise SampleTooLong(str(exc) if name is None else f"{name!r}: {exc}") from None


def packed_table(
    samples: Sequence[PackItem],
    *,
    max_length: int,
    mode: str = "ffd",
    ids: Sequence[str] | None = None,
    labels: bool = False,
    fractional: bool = False,
    cp: tuple[int, str] | None = None,
    sets_dtype: np.dtype | None = None,
    pattern: Sequence[str] = (),
) -> pa.Table:
    """Samples packed by :func:`mrope.pack` into rows of at most ``max_length`` tokens, as a
    ``pyarrow.Table`` (:func:`packed_schema`): the packed rows, then one error row per failed sample
    (or one longer than ``max_length``: ``error_code`` ``"sample_too_long"``), each naming its sample.

    ``samples`` index the input (``samples`` column); ``ids`` name them (default: their indices). With
    ``labels``, each packed row's ``labels`` are the samples' labels in row order with ``-100`` at each
    sample's first token (whose label the previous sample's last token would otherwise predict).

    ``cp = (world_size, layout)`` cuts each packed row as :func:`mrope.packing.shard` does: one table row
    per rank (``rank`` ``0 .. world_size - 1``, in order), holding that rank's tokens (``num_tokens`` its
    count), ``labels`` already shifted (the shard's), ``token_index`` and ``cu_seqlens_padded``; the
    ids, samples, ``cu_seqlens`` and grids stay the whole row's.

    ``sets_dtype`` (a job with position sets: each kept sample a ``(positions, labels, sets)``) adds
    ``position_sets`` ``[S, 1 + A, L]`` (each set's rows laid out as ``position_ids`` is, in the sets'
    order; with ``cp`` the rank's, cut as ``position_ids`` is, padding continuing each sample by its
    set's delta), ``set_names`` and ``layer_pattern``."""
    check_max_length(max_length)
    if cp is not None:
        check_split(cp[0], 0, cp[1])
    names = [str(i) for i in range(len(samples))] if ids is None else [str(n) for n in ids]
    kept: list[int] = []
    failed: list[tuple[int, str, str]] = []
    for i, item in enumerate(samples):
        if isinstance(item[0], Positions):
            try:
                check_fits(i, item[0], max_length, names[i])
                kept.append(i)
            except SampleTooLong as exc:
                failed.append((i, str(exc), exc.code))
        else:
            failed.append((i, str(item[0]), str(item[1])))
    rows = list(pack([samples[i][0] for i in kept], max_length=max_length, mode=mode)) if kept else []
    empty = np.zeros((0, 0), dtype=np.float32 if fractional else np.int64)
    out: list[dict[str, Any]] = []
    for row in rows:
        where = [kept[j] for j in row.samples]
        entry = {
            "ids": [names[i] for i in where],
            "samples": where,
            "cu_seqlens": row.cu_seqlens,
            "image_grid_thw": row.image_grid_thw,
            "video_grid_thw": row.video_grid_thw,
            "second_per_grid_ts": row.second_per_grid_ts,
            "error": "",
            "error_code": "",
        }
        row_labels = _row_labels([samples[i] for i in where]) if labels else None
        set_rows = _set_rows(row, where, samples) if sets_dtype is not None else {}
        if set_rows:
            entry.update(set_names=list(set_rows), layer_pattern=list(pattern))
        out += [{**entry, **tokens} for tokens in _token_columns(row, row_labels, cp, set_rows)]
    for i, message, code in failed:
        out.append(
            {
                "ids": [names[i]],
                "samples": [i],
                "input_ids": np.zeros(0, dtype=np.int64),
                "position_ids": empty,
                "mm_token_type_ids": np.zeros(0, dtype=np.int64),
                "cu_seqlens": np.zeros(1, dtype=np.int32),
                "num_tokens": 0,
                "image_grid_thw": np.zeros((0, 3), dtype=np.int64),
                "video_grid_thw": np.zeros((0, 3), dtype=np.int64),
                "second_per_grid_ts": np.zeros(0, dtype=np.float64),
                "error": message or "failed",
                "error_code": code or "internal_error",
                "labels": np.zeros(0, dtype=np.int64),
                "rank": None,
                "token_index": np.zeros(0, dtype=np.int64),
                "cu_seqlens_padded": np.zeros(1, dtype=np.int32),
                **set_columns(None),
            }
        )
    return _packed_arrow(out, labels=labels, fractional=fractional, cp=cp is not None, sets_dtype=sets_dtype)


def _set_rows(row: PackedRow, where: Sequence[int], samples: Sequence[PackItem]) -> dict[str, PackedRow]:
    """Each position set of a packed row's samples (``where``: their indices in ``samples``) as a
    :class:`PackedRow` of the same samples in the same order (:func:`mrope.packing._rows.make_row`)."""
    maps = [samples[i][2] for i in where]  # type: ignore[misc]
    return {
        name: make_row(where, [m[name] for m in maps], row.packed_input, row.family)  # type: ignore[index]
        for name in maps[0]  # type: ignore[union-attr]
    }


def _token_columns(
    row: PackedRow,
    labels: np.ndarray | None,
    cp: tuple[int, str] | None,
    set_rows: Mapping[str, PackedRow],
) -> list[dict[str, Any]]:
    """A packed row's token columns: the whole row, or one entry per rank (:func:`mrope.packing.shard`),
    with the position sets of ``set_rows`` (each set's row of the same samples) when there are any."""
    if cp is None:
        whole = {
            "input_ids": row.input_ids,
            "position_ids": row.position_ids,
            "mm_token_type_ids": row.mm_token_type_ids,
            "num_tokens": row.num_tokens,
            "labels": labels,
        }
        if set_rows:
            whole["position_sets"] = np.stack([r.position_ids for r in set_rows.values()])
        return [whole]
    world_size, layout = cp
    out = []
    for rank in range(world_size):
        s = shard(row, world_size=world_size, rank=rank, layout=layout, labels=labels)
        entry = {
            "input_ids": s.input_ids,
            "position_ids": s.position_ids,
            "mm_token_type_ids": s.mm_token_type_ids,
            "num_tokens": s.num_tokens,
            "labels": s.labels,
            "rank": rank,
            "token_index": s.token_index,
            "cu_seqlens_padded": s.cu_seqlens_padded,
        }
        if set_rows:
            entry["position_sets"] = np.stack(
                [
                    shard(r, world_size=world_size, rank=rank, layout=layout, labels=labels).position_ids
                    for r in set_rows.values()
                ]
            )
        out.append(entry)
    return out


def _row_labels(items: Sequence[PackItem]) -> np.ndarray:
    parts = []
    for p, lab, *_ in items:
        lab = np.full(p.num_tokens, -100, np.int64) if lab is None else np.array(lab, dtype=np.int64)
        lab[:1] = -100  # the previous sample's last token must not learn to predict this sample's first
        parts.append(lab)
    return np.concatenate(parts)


def _packed_arrow(
    rows: Sequence[Mapping[str, Any]],
    *,
    labels: bool,
    fractional: bool,
    cp: bool,
    sets_dtype: np.dtype | None,
) -> pa.Table:
    import pyarrow as pa

    schema = packed_schema(labels=labels, fractional=fractional, cp=cp, sets_dtype=sets_dtype)
    return pa.table({f.name: arrow.typed_column([row[f.name] for row in rows], f.type) for f in schema})


def pack_efficiency(table: pa.Table, max_length: int) -> float:
    """Packing efficiency of a packed table: the samples' tokens / (packed rows x ``max_length``), error
    rows left out (a row cut for context parallelism counted once, at rank 0)."""
    errors = table.column("error").to_pylist()
    tokens = [int(cu[-1]) for cu in table.column("cu_seqlens").to_pylist()]
    ranks = table.column("rank").to_pylist() if "rank" in table.column_names else [0] * len(errors)
    packed = [n for n, e, r in zip(tokens, errors, ranks, strict=True) if not e and r == 0]
    return efficiency(sum(packed), len(packed), max_length)


__all__ = [
    "PACKED_COLUMNS",
    "SHARD_COLUMNS",
    "PackItem",
    "check_fits",
    "pack_efficiency",
    "packed_schema",
    "packed_table",
]
