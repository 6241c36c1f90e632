"""Numpy arrays -> Arrow list columns, without Python lists (the faces' Parquet and Arrow tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


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


__all__ = ["list_column", "nested_column"]
