"""``mrope batch``: positions for many samples (a JSONL file, or a folder of ``.json`` / ``.jsonl`` files).

Each sample is a :mod:`mrope.pipeline` record (``id`` and ``segments`` or ``messages``); media paths are
relative to the file that holds the record. Every sample gets ``<id>.npy`` (or ``.json``) in the output
folder, or a row of ``samples.parquet`` (``--format parquet``: positions, input_ids, labels, masks), or
with ``--pack MAX_LEN`` the rows of ``packed.parquet`` (the samples packed by :func:`mrope.pack`), and a
line in ``manifest.jsonl`` (with its ``error`` and ``error_code``). A sample that fails is reported with
its id and does not stop the batch (the exit code is 1 when any failed); a job-level error (text but no
``--tokenizer``) stops it at once, naming the option.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mrope._cli._args import CliError, add_model_options, rule_overrides
from mrope._cli._output import positions_document
from mrope._cli._progress import progress
from mrope._cli._sequence import data_options, max_tokens_from_arg, model_from_args, tokenizer_from_arg
from mrope._errors import JobError, RecordError
from mrope._result_rows import describe_error, error_code, error_row, result_row, rows_to_table
from mrope.packing._bins import MODES
from mrope.packing._shard import SHARD_LAYOUTS
from mrope.packing._table import PackItem, check_fits, pack_efficiency, packed_table
from mrope.pipeline import Preprocessor

MANIFEST = "manifest.jsonl"
PARQUET = "samples.parquet"
PACKED = "packed.parquet"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "batch",
        help="positions for many samples (JSONL or a folder), with a progress bar",
        description="Build positions for every sample of a JSONL file (one record per line) or a folder of "
        ".json (one record each) and .jsonl files. A record is {id, segments | messages, [model], [rules]}; "
        "media paths are relative to the file holding the record. Writes <id>.npy (or .json) per sample "
        f"and {MANIFEST}; failed samples are reported and the exit code is 1 if any failed.",
    )
    p.add_argument("input", help="a .jsonl file, or a folder of .json / .jsonl files")
    p.add_argument("--out-dir", required=True, help="output folder (created if missing)")
    p.add_argument(
        "--format",
        choices=("npy", "json", "parquet"),
        default=None,
        help="npy: int64 [3, T] per sample (the default without --pack); json: positions, spans and grids "
        f"per sample; parquet: one {PARQUET} of every sample (positions, input_ids, labels, assistant_mask, "
        f"grids, error, error_code; needs pyarrow), or with --pack one {PACKED} of packed rows",
    )
    p.add_argument(
        "--pack",
        type=int,
        metavar="MAX_LEN",
        default=None,
        help=f"pack the samples with mrope.pack into rows of at most MAX_LEN tokens and write one {PACKED} "
        "(input_ids, position_ids [1 + A][L] with the text row first, mm_token_type_ids, cu_seqlens, "
        "samples, ids, labels, grids; then an error row per failed sample, with error_code): Parquet "
        "output only (implies --format parquet; --format npy or json is refused). Prints the packing "
        "efficiency",
    )
    p.add_argument(
        "--pack-mode",
        choices=MODES,
        default="ffd",
        help="with --pack: ffd (first-fit-decreasing, fewest rows; default) or stream (order-keeping)",
    )
    p.add_argument(
        "--cp-size",
        type=int,
        metavar="W",
        default=None,
        help=f"with --pack: cut each packed row for W context- (or sequence-) parallel ranks as "
        f"mrope.packing.shard does, one {PACKED} row per rank with a rank column (0 .. W - 1): that "
        "rank's input_ids, position_ids, mm_token_type_ids, shifted labels, token_index and the row's "
        "cu_seqlens_padded",
    )
    p.add_argument(
        "--cp-layout",
        choices=SHARD_LAYOUTS,
        default="zigzag",
        help="with --cp-size: zigzag (TransformerEngine / Megatron-Core context parallelism; default) or "
        "contiguous (DeepSpeed-Ulysses)",
    )
    p.add_argument(
        "--decode-check",
        action="store_true",
        help="decode each media file's pixels, so a truncated file fails here (error_code "
        "media_decode_failed) rather than in the model's processor",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary on success")
    add_model_options(p)
    p.set_defaults(run=run)


@dataclass(frozen=True)
class Sample:
    """One input record, or why it could not be read.

    Attributes:
        where: ``file:line`` (or the file) it came from.
        base_dir: folder its relative media paths are resolved against.
        record: the parsed record, or ``None`` when ``problem`` says why not.
        problem: the read or JSON error.
    """

    where: str
    base_dir: str
    record: Any
    problem: str = ""

    def default_id(self) -> str:
        """``file-line`` for a JSONL line, the file's stem for a ``.json`` record."""
        name, sep, line = self.where.rpartition(":")
        return f"{name}-{line}" if sep else Path(self.where).stem


def _files(root: Path) -> list[Path]:
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.suffix.lower() in (".json", ".jsonl") and p.is_file())
        if not files:
            raise CliError(f"{root} holds no .json or .jsonl files")
        return files
    if not root.exists():
        raise CliError(f"no such file or folder: {root}")
    return [root]


def _jsonl_lines(path: Path) -> list[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8") as f:
            return [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def samples(root: Path) -> tuple[int, Iterator[Sample]]:
    """The number of samples under ``root`` and an iterator over them (a ``.json`` file is one record,
    every non-empty line of any other file is one)."""
    plan: list[tuple[Path, list[tuple[int, str]] | None]] = []
    for path in _files(root):
        plan.append((path, None if path.suffix.lower() == ".json" else _jsonl_lines(path)))
    total = sum(1 if lines is None else len(lines) for _, lines in plan)

    def gen() -> Iterator[Sample]:
        for path, lines in plan:
            base = str(path.parent.resolve())
            if lines is None:
                try:
                    yield Sample(path.name, base, json.loads(path.read_text(encoding="utf-8")))
                except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                    yield Sample(path.name, base, None, f"cannot read the record: {exc}")
                continue
            for n, line in lines:
                where = f"{path.name}:{n}"
                try:
                    yield Sample(where, base, json.loads(line))
                except json.JSONDecodeError as exc:
                    yield Sample(where, base, None, f"not valid JSON: {exc.msg} at column {exc.colno}")

    return total, gen()


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(sample_id: str) -> str:
    """A file name for a sample id: runs of characters outside ``[A-Za-z0-9._-]`` become ``_``."""
    stem = _UNSAFE.sub("_", sample_id).strip("._")
    return stem[:200] or "sample"


def _write(out_dir: Path, stem: str, fmt: str, positions: Any, model: str) -> str:
    name = f"{stem}.{fmt}"
    if fmt == "npy":
        with (out_dir / name).open("wb") as f:
            np.save(f, positions.ids, allow_pickle=False)
    else:
        (out_dir / name).write_text(json.dumps(positions_document(positions, model)) + "\n", encoding="utf-8")
    return name


class ParquetRows:
    """The rows of ``--format parquet``: one per sample, in input order, written once at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []

    def add(self, sample_id: str, source: str, p: Any, labels: Any) -> None:
        if p.ids.dtype.kind == "f":
            raise RecordError(
                f"the {p.rules.name!r} rules give fractional (float32) positions, which the int64 columns of "
                f"{PARQUET} cannot hold; use --format npy or json for such samples"
            )
        self.rows.append({"id": sample_id, "source": source, **result_row(p, input_ids=True, labels=labels)})

    def failed(self, sample_id: str, source: str, message: str, code: str) -> None:
        self.rows.append(
            {"id": sample_id, "source": source, **error_row(message, input_ids=True, labels=True, code=code)}
        )

    def write(self) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CliError("--format parquet needs pyarrow (pip install pyarrow)") from None
        meta = [{"id": r["id"], "source": r["source"]} for r in self.rows]
        table = rows_to_table(self.rows, meta, keep=("id", "source"), input_ids=True, labels=True)
        try:
            pq.write_table(table, self.path)
        except OSError as exc:
            raise CliError(f"cannot write {self.path}: {exc}") from None


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
    ) -> None:
        self.path, self.max_length, self.mode, self.fractional = path, max_length, mode, fractional
        self.cp = cp
        self.items: list[PackItem] = []
        self.ids: list[str] = []

    def add(self, sample_id: str, p: Any, labels: Any) -> None:
        # too long: this sample's error, reported now
        check_fits(len(self.items), p, self.max_length, sample_id)
        self.items.append((p, labels))
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


def output_format(args: argparse.Namespace) -> str:
    """``--format``, defaulting to parquet with ``--pack`` (which needs it) and npy without."""
    if args.pack is None:
        if args.pack_mode != "ffd":
            raise CliError("--pack-mode needs --pack MAX_LEN (the row length in tokens)")
        if args.cp_size is not None or args.cp_layout != "zigzag":
            raise CliError("--cp-size and --cp-layout need --pack MAX_LEN (they cut packed rows)")
        return args.format or "npy"
    if args.cp_size is not None and args.cp_size < 1:
        raise CliError(f"--cp-size takes a number of ranks >= 1; got {args.cp_size}")
    if args.cp_size is None and args.cp_layout != "zigzag":
        raise CliError("--cp-layout needs --cp-size W (the number of ranks)")
    if args.format not in (None, "parquet"):
        raise CliError(
            f"--pack writes one {PACKED} of packed rows: it needs --format parquet, got --format "
            f"{args.format} (drop --format, or drop --pack for one file per sample)"
        )
    if args.pack < 1:
        raise CliError(f"--pack takes a row length in tokens >= 1; got {args.pack}")
    return "parquet"


def run(args: argparse.Namespace) -> int:
    fmt = output_format(args)
    root = Path(args.input)
    total, stream = samples(root)
    if total == 0:
        raise CliError(f"{root} holds no samples")
    out_dir = Path(args.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        manifest = (out_dir / MANIFEST).open("w", encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None
    base = Preprocessor(
        model=None
        if args.model is None and args.model_dir is None
        else model_from_args(args.model, None, args.model_dir),
        rules=rule_overrides(args.rule) or None,
        tokenizer=tokenizer_from_arg(args.tokenizer),
        max_tokens=max_tokens_from_arg(args.max_tokens),
        decode_check=args.decode_check,
        labels=fmt == "parquet",
        **data_options(args),
    )
    failed: list[str] = []
    used: dict[str, str] = {}
    packed = None
    if args.pack is not None:  # float32 positions when the job's model keeps fractional time
        cp = None if args.cp_size is None else (args.cp_size, args.cp_layout)
        packed = PackedRows(out_dir / PACKED, args.pack, args.pack_mode, base.fractional, cp)
    table = ParquetRows(out_dir / PARQUET) if fmt == "parquet" and packed is None else None
    with manifest, progress(total, "mrope batch", quiet=args.quiet) as bar:
        for sample in stream:
            record = sample.record
            raw_id = record.get("id") if isinstance(record, dict) else None
            sample_id = sample.default_id() if raw_id is None else str(raw_id)
            entry: dict[str, Any] = {"id": sample_id, "source": sample.where, "file": None}
            try:
                if sample.problem:
                    raise CliError(sample.problem)
                stem = file_stem(sample_id)
                if stem in used:
                    raise CliError(
                        f"its output name {stem!r} is taken by sample {used[stem]!r} (ids must be unique)"
                    )
                pre = base.with_options(base_dir=sample.base_dir)
                if packed is not None:
                    p, labels = pre.checked_sample(record)
                    packed.add(sample_id, p, labels)
                    entry["file"] = PACKED
                elif table is not None:
                    p, labels = pre.sample(record)
                    table.add(sample_id, sample.where, p, labels)
                    entry["file"] = PARQUET
                else:
                    p = pre.positions(record)
                    entry["file"] = _write(out_dir, stem, fmt, p, p.rules.name)
                used[stem] = sample_id
                entry.update(
                    num_tokens=p.num_tokens,
                    delta=int(p.delta),
                    image_grid_thw=p.image_grid_thw.tolist(),
                    video_grid_thw=p.video_grid_thw.tolist(),
                    second_per_grid_ts=p.second_per_grid_ts.tolist(),
                    error="",
                    error_code="",
                )
            except JobError as exc:  # every later sample would fail alike: stop now, naming the option
                raise CliError(f"sample {sample_id!r} ({sample.where}): {exc}") from None
            except Exception as exc:  # one sample's failure never stops the batch
                message = str(exc) if isinstance(exc, CliError) else describe_error(exc)
                entry["error"] = message
                entry["error_code"] = getattr(exc, "code", None) or error_code(exc)
                failed.append(sample_id)
                bar.write(f"mrope batch: sample {sample_id!r} ({sample.where}) failed: {message}")
                if table is not None:
                    table.failed(sample_id, sample.where, message, entry["error_code"])
                if packed is not None:
                    packed.failed(sample_id, message, entry["error_code"])
            manifest.write(json.dumps(entry) + "\n")
            bar.update()
    if table is not None:
        table.write()
    if packed is not None:
        line = packed.write()
        if not args.quiet:
            print(line, file=sys.stderr)
    ok = total - len(failed)
    if failed or not args.quiet:
        summary = (
            f"mrope batch: {total} samples, {ok} ok, {len(failed)} failed; manifest {out_dir / MANIFEST}"
        )
        print(summary, file=sys.stderr)
    return 1 if failed else 0
