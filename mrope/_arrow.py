"""The faces' Arrow columns: the columns their tables share, and numpy arrays -> Arrow without Python lists.

The pipeline's result table (:func:`mrope._result_rows.arrow_schema`) and the packed table
(:func:`mrope.packing._table.packed_schema`) take the columns they share from here, so each is defined
once; :func:`typed_column` fills any column of either from its rows' numpy values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


def positions_type(fractional: bool = False) -> pa.DataType:
    """The type of a position-id column (``[A][T]`` a row): ``list<list<int64>>``, or
    ``list<list<float32>>`` for a model that keeps fractional time."""
    import pyarrow as pa

    return pa.list_(pa.list_(pa.float32() if fractional else pa.int64()))


SET_COLUMNS = ("position_sets", "set_names", "set_deltas", "layer_pattern")
"""The columns of a row with every position set of its model (a job with ``layer_sets``), in table
order (types: :func:`set_fields`)."""


def set_fields(dtype: np.dtype, deltas: bool = True) -> list[tuple[str, pa.DataType]]:
    """:data:`SET_COLUMNS` with their types: ``position_sets`` (``[S][A][T]``, or ``[S][1 + A][L]`` in a
    packed row, of ``dtype``: int64, float32, or float64 where integer and fractional sets meet),
    ``set_names`` and ``layer_pattern`` (``list<string>``) and, with ``deltas`` (not in packed rows,
    which carry no delta), ``set_deltas`` (``list<float64>``)."""
    import pyarrow as pa

    names = pa.list_(pa.string())
    sets = pa.list_(pa.list_(pa.list_(pa.from_numpy_dtype(np.dtype(dtype)))))
    cols = list(zip(SET_COLUMNS, (sets, names, pa.list_(pa.float64()), names), strict=True))
    return cols if deltas else [c for c in cols if c[0] != "set_deltas"]


SEQUENCE_COLUMNS = ("num_tokens", "image_grid_thw", "video_grid_thw", "second_per_grid_ts")
"""The columns that size a row's sequence, in table order (types: :func:`sequence_fields`)."""

ERROR_COLUMNS = ("error", "error_code")
"""Why a row's record failed and the failure's stable code (``""`` on a row that did not fail)."""


def sequence_fields() -> list[tuple[str, pa.DataType]]:
    """:data:`SEQUENCE_COLUMNS` with their types: ``num_tokens`` (int64), ``image_grid_thw`` and
    ``video_grid_thw`` (``list<list<int64>>``, ``[n, 3]`` encoder grids in order) and
    ``second_per_grid_ts`` (``list<float64>``, one a video)."""
    import pyarrow as pa

    grids = pa.list_(pa.list_(pa.int64()))
    types = (pa.int64(), grids, grids, pa.list_(pa.float64()))
    return list(zip(SEQUENCE_COLUMNS, types, strict=True))


def error_fields() -> list[tuple[str, pa.DataType]]:
    """:data:`ERROR_COLUMNS` with their types (strings)."""
    import pyarrow as pa

    return [(name, pa.string()) for name in ERROR_COLUMNS]


def list_column(arrays: Sequence[np.ndarray], value_type: pa.DataType) -> pa.Array:
    """``list<value>`` from 1-D arrays, without Python lists."""
    import pyarrow as pa

    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    values = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def nested_column(arrays: Sequence[np.ndarray], value_type: pa.DataType | None = None) -> pa.Array:
    """``list<list<int64>>`` (or ``value_type``) from 2-D arrays (rows become inner lists)."""
    import pyarrow as pa

    rows = [row for a in arrays for row in a]
    inner = list_column(rows, pa.int64() if value_type is None else value_type)
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([a.shape[0] for a in arrays], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def _numeric(value_type: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(value_type) or pa.types.is_floating(value_type)


def typed_column(values: Sequence[Any], column_type: pa.DataType) -> pa.Array:
    """A column of type ``column_type`` from its rows' values: ``list<list<number>>`` from 2-D arrays
    (:func:`nested_column`) and ``list<number>`` from 1-D ones (:func:`list_column`), each taken as the
    column's number type; any other type (strings, scalars, lists of strings) through ``pyarrow.array``."""
    import pyarrow as pa

    if pa.types.is_list(column_type):
        inner = column_type.value_type
        if pa.types.is_list(inner) and pa.types.is_list(inner.value_type):  # [n][A][T] from 3-D arrays
            offsets = np.zeros(len(values) + 1, dtype=np.int32)
            np.cumsum([np.shape(v)[0] for v in values], out=offsets[1:])
            planes = [plane for v in values for plane in v]
            return pa.ListArray.from_arrays(pa.array(offsets), typed_column(planes, inner))
        if pa.types.is_list(inner) and _numeric(inner.value_type):
            number = inner.value_type
            return nested_column([np.asarray(v, dtype=number.to_pandas_dtype()) for v in values], number)
        if _numeric(inner):
            return list_column([np.asarray(v, dtype=inner.to_pandas_dtype()) for v in values], inner)
    return pa.array(values, type=column_type)


__all__ = [
    "ERROR_COLUMNS",
    "SEQUENCE_COLUMNS",
    "SET_COLUMNS",
    "error_fields",
    "list_column",
    "nested_column",
    "positions_type",
    "sequence_fields",
    "set_fields",
    "typed_column",
]
