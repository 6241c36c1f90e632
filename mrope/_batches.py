"""A batch of records in any of the shapes a data job hands over -> plain Python records.

Records read through Arrow (Hugging Face ``datasets``, Ray Data, pandas) hold numpy arrays where the JSON
had lists, NaN where an int field was null, and floats where an int column had nulls: :func:`plain` and
:func:`whole_floats_as_ints` undo that, and :func:`batch_records` takes a dict of columns, a pandas
``DataFrame``, a ``pyarrow.Table`` or a list of records to a list of record dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from mrope._errors import RecordError


def plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars turned into Python lists and numbers, recursively.

    Records read through Arrow (``datasets``, Ray) hold numpy arrays where the JSON had lists, and a
    numpy batch holds NaN where an int field was null (absent) in that row: NaN becomes ``None``. A
    ``uint8`` array of two or more axes is media in memory (an image ``[H, W, C]``, frames
    ``[T, H, W, C]``: Arrow never makes one) and is kept as it is.
    """
    if isinstance(value, np.ndarray) and value.ndim >= 2 and value.dtype == np.uint8:
        return value
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _missing(value: Any) -> bool:
    """Whether a pandas cell is missing (NaN, ``pd.NA``, ``pd.NaT``)."""
    return (isinstance(value, float) and math.isnan(value)) or type(value).__name__ in ("NAType", "NaTType")


def whole_floats_as_ints(value: Any) -> Any:
    """``value`` (already :func:`plain`) with whole floats turned into ints, recursively.

    Arrow's numpy and pandas conversions turn an int field that is null in some row into a float column
    (``12`` arrives as ``12.0``), so in such a batch a whole float cannot be told from an int. Float fields
    (``fps``, ``frame_times``, ...) take ints as well, so the conversion loses nothing. Plain records
    (JSON, ``datasets.map``) keep their types: there ``12.0`` is not a token count, as on every face.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: whole_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_floats_as_ints(v) for v in value]
    return value


def batch_records(batch: Any) -> list[dict[str, Any]]:
    """The rows of a batch given as a dict of columns, a pandas ``DataFrame``, a ``pyarrow.Table`` or a
    list of records.

    The rows of numpy and pandas batches go through :func:`plain` and :func:`whole_floats_as_ints`
    (Arrow's conversion to them turns int fields with nulls into floats).
    """
    if isinstance(batch, list) and all(isinstance(r, Mapping) for r in batch):  # records (a plain loop)
        return [dict(r) for r in batch]
    if hasattr(batch, "to_pylist"):  # pyarrow.Table: types kept
        return list(batch.to_pylist())
    if hasattr(batch, "to_dict") and hasattr(batch, "columns"):  # pandas.DataFrame
        # pandas fills a column's missing cells with NaN (or pd.NA): they mean "absent", like None
        rows = [{k: None if _missing(v) else v for k, v in r.items()} for r in batch.to_dict("records")]
        return [whole_floats_as_ints(plain(r)) for r in rows]
    if isinstance(batch, Mapping):
        columns = {k: list(v) for k, v in batch.items()}
        sizes = {len(v) for v in columns.values()}
        if len(sizes) > 1:
            raise RecordError(f"batch columns have different lengths {sorted(sizes)}")
        n = sizes.pop() if sizes else 0
        return [whole_floats_as_ints(plain({k: v[i] for k, v in columns.items()})) for i in range(n)]
    raise RecordError(
        "a batch must be a dict of columns, a pandas DataFrame, a pyarrow Table or a list of records; got "
        f"{type(batch).__name__}"
    )


__all__ = ["batch_records", "plain", "whole_floats_as_ints"]
