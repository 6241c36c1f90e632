"""The pipeline's result rows: one record's columns (or its failure's), and the Arrow table of many.

A successful record gives ``positions`` (int64 ``[3, T]``, float32 for a model that keeps fractional
time), ``delta``, the sequence columns of :mod:`mrope._arrow` and an empty ``error``; a failed one gives
empty arrays of the same dtypes, the one-line message (:func:`describe_error`) and its stable code
(:func:`error_code`). :func:`arrow_schema` fixes the column types per job, so every batch of a job has
the same schema; :func:`rows_to_table` builds the table without Python lists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope import _arrow as arrow
from mrope._batches import plain
from mrope._errors import MRopeError
from mrope._position_sets import stacked_ids
from mrope._positions import Positions

if TYPE_CHECKING:
    import pyarrow as pa

RESULT_COLUMNS = ("positions", "delta", *arrow.SEQUENCE_COLUMNS, *arrow.ERROR_COLUMNS, "media")
"""The columns of a result row (``media``: :func:`media_json` of its media records; plus ``input_ids``,
``labels`` and ``program`` (the bytes of :meth:`mrope.PositionProgram.to_bytes`) when asked for, and
``generation_ids`` in a job whose model generates images). ``error_code`` is a stable machine-readable
name of the failure (:func:`error_code`), ``""`` on success. A job with ``layer_sets`` adds
:data:`mrope._arrow.SET_COLUMNS` (:func:`set_columns`)."""


def error_code(exc: BaseException) -> str:
    """The stable machine-readable code of a failed record: the error type's ``code`` (``invalid_media``,
    ``media_decode_failed``, ``layout_error``, ``token_error``, ``invalid_request``,
    ``tokenizer_required``, ``too_many_tokens``, ...), ``internal_error`` for an unexpected exception."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else "internal_error"


def describe_error(exc: BaseException) -> str:
    """One line for a failed record: the library's message, or the exception type and message."""
    text = " ".join(str(exc).split())
    if isinstance(exc, MRopeError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def media_items(p: Positions) -> list[dict[str, Any] | None]:
    """A record's media items in segment order: each image's and video's
    :meth:`mrope.media.MediaRecord.as_dict`, ``None`` for one given by its grid."""
    return [None if r is None else r.as_dict() for r in p.media]


def media_json(p: Positions) -> str:
    """:func:`media_items` as one JSON string: one string column whatever the records mix, so every
    batch of a job keeps one Arrow schema."""
    return json.dumps(media_items(p), separators=(",", ":"))


def set_columns(sets: Mapping[str, Positions] | None, pattern: Sequence[str] = ()) -> dict[str, Any]:
    """The :data:`mrope._arrow.SET_COLUMNS` of a row: ``position_sets``, every set's ids stacked ``[S, A,
    T]`` in their order (:func:`mrope._position_sets.stacked_ids`), ``set_names``, ``set_deltas`` and the
    ``layer_pattern`` (layer ``i`` reads ``layer_pattern[i % len]``); ``sets=None``: a failed row's, empty."""
    if sets is None:
        return {"position_sets": np.zeros((0, 0, 0)), "set_names": [], "set_deltas": [], "layer_pattern": []}
    return {
        "position_sets": stacked_ids(sets),
        "set_names": list(sets),
        "set_deltas": [float(p.delta) for p in sets.values()],
        "layer_pattern": list(pattern),
    }


def result_row(
    p: Positions,
    *,
    input_ids: bool = False,
    generation: bool = False,
    labels: np.ndarray | None = None,
    program: bool = False,
    sets: Mapping[str, Positions] | None = None,
    pattern: Sequence[str] = (),
) -> dict[str, Any]:
    """The columns of a successful record (``generation``: with ``generation_ids``, ``[3, 0]`` when the
    record has no image to generate; ``labels``: with ``labels`` and ``assistant_mask``; ``program``:
    with ``program``, the bytes of ``p.program()``; ``sets``: every position set of the record, ``p``
    the first, with the layer ``pattern``, as :func:`set_columns`)."""
    row: dict[str, Any] = {
        "positions": p.ids,
        "delta": float(p.delta) if p.ids.dtype.kind == "f" else int(p.delta),
        "num_tokens": int(p.num_tokens),
        "image_grid_thw": p.image_grid_thw,
        "video_grid_thw": p.video_grid_thw,
        "second_per_grid_ts": p.second_per_grid_ts,
        "error": "",
        "error_code": "",
        "media": media_json(p),
    }
    if input_ids:
        row["input_ids"] = p.input_ids
    if labels is not None:
        row["labels"] = labels
        row["assistant_mask"] = (labels != -100).astype(np.int8)
    if generation:
        row["generation_ids"] = (
            p.generation_ids if p.generation_ids is not None else np.zeros((3, 0), dtype=np.int64)
        )
    if program:
        row["program"] = p.program().to_bytes()
    if sets is not None:
        row.update(set_columns(sets, pattern))
    return row


def error_row(
    message: str,
    *,
    input_ids: bool = False,
    fractional: bool = False,
    generation: bool = False,
    labels: bool = False,
    code: str = "internal_error",
    program: bool = False,
    sets: bool = False,
) -> dict[str, Any]:
    """The columns of a failed record: empty arrays of the right shapes and dtypes (an empty ``program``,
    empty position sets with ``sets``), the message and its code."""
    row: dict[str, Any] = {
        "positions": np.zeros((3, 0), dtype=np.float32 if fractional else np.int64),
        "delta": 0,
        "num_tokens": 0,
        "image_grid_thw": np.zeros((0, 3), dtype=np.int64),
        "video_grid_thw": np.zeros((0, 3), dtype=np.int64),
        "second_per_grid_ts": np.zeros(0, dtype=np.float64),
        "error": message or "failed",
        "error_code": code,
        "media": "[]",
    }
    if input_ids:
        row["input_ids"] = np.zeros(0, dtype=np.int64)
    if labels:
        row["labels"] = np.zeros(0, dtype=np.int64)
        row["assistant_mask"] = np.zeros(0, dtype=np.int8)
    if generation:
        row["generation_ids"] = np.zeros((3, 0), dtype=np.int64)
    if program:
        row["program"] = b""
    if sets:
        row.update(set_columns(None))
    return row


def arrow_schema(
    *,
    input_ids: bool = False,
    fractional: bool = False,
    generation: bool = False,
    labels: bool = False,
    program: bool = False,
    sets_dtype: np.dtype | None = None,
) -> pa.Schema:
    """The Arrow types of the result columns (``fractional``: float32 positions and a float64 delta, for
    a job whose model keeps fractional time; ``generation``: a ``generation_ids`` column, for a job whose
    model generates images; ``program``: a binary ``program`` column; ``sets_dtype``: the position set
    columns, ``position_sets`` of that number type, :func:`mrope._arrow.set_fields`)."""
    import pyarrow as pa

    cols = [
        ("positions", arrow.positions_type(fractional)),
        ("delta", pa.float64() if fractional else pa.int64()),
        *arrow.sequence_fields(),
        *arrow.error_fields(),
        ("media", pa.string()),
    ]
    if input_ids:
        cols.append(("input_ids", pa.list_(pa.int64())))
    if labels:
        cols += [("labels", pa.list_(pa.int64())), ("assistant_mask", pa.list_(pa.int8()))]
    if generation:
        cols.append(("generation_ids", arrow.positions_type()))
    if program:
        cols.append(("program", pa.binary()))
    if sets_dtype is not None:
        cols += arrow.set_fields(sets_dtype)
    return pa.schema(cols)


def rows_to_table(
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]] = (),
    *,
    keep: Sequence[str] = ("id",),
    input_ids: bool = False,
    fractional: bool = False,
    generation: bool = False,
    labels: bool = False,
    program: bool = False,
    sets_dtype: np.dtype | None = None,
) -> pa.Table:
    """Result rows (:func:`result_row`, :func:`error_row`) as a ``pyarrow.Table`` with
    :func:`arrow_schema` types, after the ``keep`` columns copied from ``records`` (those every record
    has; an input column named like a result column is replaced by the result)."""
    import pyarrow as pa

    schema = arrow_schema(
        input_ids=input_ids,
        fractional=fractional,
        generation=generation,
        labels=labels,
        program=program,
        sets_dtype=sets_dtype,
    )
    columns: dict[str, pa.Array] = {}
    for name in keep:
        if name in schema.names:
            continue
        if records and all(name in r for r in records):
            columns[name] = pa.array([plain(r[name]) for r in records])
    columns.update({f.name: arrow.typed_column([row[f.name] for row in rows], f.type) for f in schema})
    return pa.table(columns)


__all__ = [
    "RESULT_COLUMNS",
    "arrow_schema",
    "describe_error",
    "error_code",
    "error_row",
    "media_items",
    "media_json",
    "result_row",
    "rows_to_table",
    "set_columns",
]
