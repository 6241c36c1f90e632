"""The tables ``mrope batch`` writes: ``samples.parquet`` (a row per sample, in row groups as the job goes)
and ``packed.parquet`` (the samples packed with :func:`mrope.pack`, written at the end)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mrope._cli._args import CliError
from mrope._job_sets import JobSets
from mrope._result_rows import error_row, rows_to_table
from mrope.packing._table import PackItem, check_fits, pack_efficiency, packed_table

PARQUET = "samples.parquet"
PACKED = "packed.parquet"

ROW_GROUP = 256
"""Rows of ``samples.parquet`` held before they are written as one row group (``--row-group``)."""


class ParquetRows:
    """The rows of ``--format parquet``: one per sample, in input order, written in row groups of
    ``row_group`` rows as they come (:meth:`close` writes the last group and the footer, also when the
    job stops early, so the rows written so far stay readable)."""

    def __init__(
        self,
        path: Path,
        row_group: int = ROW_GROUP,
        fractional: bool = False,
        sets_dtype: np.dtype | None = None,
    ) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CliError("--format parquet needs pyarrow (pip install pyarrow)") from None
        self.path, self.row_group = path, row_group
        self.rows: list[dict[str, Any]] = []
        self.columns = {"input_ids": True, "labels": True, "fractional": fractional, "sets_dtype": sets_dtype}
        self.schema = rows_to_table([], keep=(), **self.columns).schema
        self.schema = self.schema.insert(0, _text_field("source")).insert(0, _text_field("id"))
        try:
            self.writer = pq.ParquetWriter(path, self.schema)
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc}") from None

    def add(self, sample_id: str, source: str, row: dict[str, Any]) -> None:
        self.rows.append({"id": sample_id, "source": source, **row})
        if len(self.rows) >= self.row_group:
            self.flush()

    def failed(self, sample_id: str, source: str, message: str, code: str) -> None:
        failed = error_row(
            message, input_ids=True, labels=True, code=code, sets=self.columns["sets_dtype"] is not None
        )
        self.add(sample_id, source, failed)

    def flush(self) -> None:
        """Write the rows held as one row group."""
        if not self.rows:
            return
        meta = [{"id": r["id"], "source": r["source"]} for r in self.rows]
        table = rows_to_table(self.rows, meta, keep=("id", "source"), **self.columns)
        self.rows = []
        try:
            self.writer.write_table(table.cast(self.schema))
        except OSError as exc:
            raise CliError(f"cannot write {self.path}: {exc}") from None

    def close(self) -> None:
        """Write the rows held and the file's footer."""
        try:
            self.flush()
        finally:
            self.writer.close()


def _text_field(name: str) -> Any:
    import pyarrow as pa

    return pa.field(name, pa.string())


class PackedRows:
    """The rows of ``--pack``: every sample kept (or its failure) in input order, packed with
    :func:`mrope.pack` and written once at the end (:func:`mrope.packing._table.packed_table`)."""

    def __init__(
        self,
        path: Path,
        max_length: int,
        mode: str,
        fractional: bool = False,
        cp: tuple[int, str] | None = None,
        sets: JobSets | None = None,
    ) -> None:
        self.path, self.max_length, self.mode, self.fractional = path, max_length, mode, fractional
        self.cp, self.sets = cp, sets
        self.items: list[PackItem] = []
        self.ids: list[str] = []

    def add(self, sample_id: str, p: Any, labels: Any, sets: Any = None) -> None:
        # too long: this sample's error, reported now
        check_fits(len(self.items), p, self.max_length, sample_id)
        self.items.append((p, labels, sets))
        self.ids.append(sample_id)

    def failed(self, sample_id: str, message: str, code: str) -> None:
        self.items.append((message, code))
        self.ids.append(sample_id)

    def write(self) -> str:
        """Write the table; returns the packing summary line."""
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CliError("--pack needs pyarrow (pip install pyarrow)") from None
        table = packed_table(
            self.items,
            ids=self.ids,
            max_length=self.max_length,
            mode=self.mode,
            labels=True,
            fractional=self.fractional,
            cp=self.cp,
            sets_dtype=None if self.sets is None else self.sets.dtype,
            pattern=() if self.sets is None else self.sets.pattern,
        )
        try:
            pq.write_table(table, self.path)
        except OSError as exc:
            raise CliError(f"cannot write {self.path}: {exc}") from None
        rows = sum(1 for e in table.column("error").to_pylist() if not e)
        packed = sum(1 for item in self.items if not isinstance(item[0], str))
        split = "" if self.cp is None else f", each cut for {self.cp[0]} ranks ({self.cp[1]})"
        rows //= 1 if self.cp is None else self.cp[0]
        return (
            f"mrope batch: packed {packed} samples into {rows} rows of <= {self.max_length} tokens "
            f"({self.mode}){split}, packing efficiency {pack_efficiency(table, self.max_length):.3f}; "
            f"{self.path}"
        )


__all__ = ["PACKED", "PARQUET", "ROW_GROUP", "PackedRows", "ParquetRows"]
