"""``mrope batch``: positions for many samples (a JSONL file, or a folder of ``.json`` / ``.jsonl`` files).

Each sample is a :mod:`mrope.pipeline` record (``id`` and ``segments`` or ``messages``); media paths are
relative to the file that holds the record. Every sample gets ``<id>.npy`` (or ``.json``) in the output
folder, or a row of ``samples.parquet`` (``--format parquet``: positions, input_ids, labels, masks), or
with ``--pack MAX_LEN`` the rows of ``packed.parquet`` (the samples packed by :func:`mrope.pack`), and a
line in ``manifest.jsonl`` (with its ``error`` and ``error_code``). A sample that fails is reported with
its id and does not stop the batch (the exit code is 1 when any failed); a job-level error (text but no
``--tokenizer``) stops it at once, naming the option.

The input is read a line at a time and ``samples.parquet`` is written in row groups of
:data:`ROW_GROUP` rows as the job goes, so memory stays flat in the number of samples and what was
written before a failure (a job-level error, Ctrl-C, SIGTERM) stays readable. ``--workers N`` computes the samples in N processes
(:func:`mrope._cli._workers.ordered_map`); the outputs keep the input order either way.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mrope._cli._args import CliError, add_model_options, positive_int, rule_overrides
from mrope._cli._batch_tables import PACKED, PARQUET, ROW_GROUP, PackedRows, ParquetRows
from mrope._cli._output import positions_document, save_sets
from mrope._cli._progress import progress
from mrope._cli._sequence import data_options, max_tokens_from_arg, model_from_args, tokenizer_from_arg
from mrope._cli._workers import ordered_map
from mrope._errors import JobError, MRopeError, RecordError
from mrope._result_rows import describe_error, error_code, media_items, result_row
from mrope.packing._bins import MODES
from mrope.packing._shard import SHARD_LAYOUTS
from mrope.pipeline import Preprocessor

MANIFEST = "manifest.jsonl"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "batch",
        help="positions for many samples (JSONL or a folder), with a progress bar",
        description="Build positions for every sample of a JSONL file (one record per line) or a folder of "
        ".json (one record each) and .jsonl files. A record is {id, segments | messages, [model], [rules]} (or "
        "TRL's images + messages, LLaVA's image + conversations); "
        "media paths are relative to the file holding the record. Writes <id>.npy (or .json) per sample "
        f"and {MANIFEST}; failed samples are reported and the exit code is 1 if any failed.",
    )
    p.add_argument("input", help="a .jsonl file, or a folder of .json / .jsonl files")
    p.add_argument("--out-dir", required=True, help="output folder (created if missing)")
    p.add_argument(
        "--format",
        choices=("npy", "json", "program", "parquet"),
        default=None,
        help="npy: int64 [3, T] per sample (the default without --pack); json: positions, spans and grids "
        "per sample; program: the position program per sample (<id>.mrpg, mrope.PositionProgram.to_bytes); "
        f"parquet: one {PARQUET} of every sample (positions, input_ids, labels, assistant_mask, "
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
    p.add_argument(
        "--workers",
        default="1",
        metavar="N",
        help="compute the samples in N processes (default 1); the outputs keep the input order",
    )
    p.add_argument(
        "--row-group",
        default=str(ROW_GROUP),
        metavar="ROWS",
        help=f"with --format parquet: rows per Parquet row group, written as the job goes (default "
        f"{ROW_GROUP}; memory holds at most one group, and the groups written stay readable if the job stops)",
    )
    p.add_argument(
        "--layer-sets",
        action="store_true",
        help="every position set of the model (a per-layer choice, e.g. circle-rope-age) per sample: npy "
        "the sets stacked [S, 3, T], json the sets document, parquet and --pack the position_sets, "
        "set_names and layer_pattern columns (positions the first set); needs --model or --model-dir",
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


def _count_lines(path: Path) -> int:
    """The non-empty lines of ``path``, counted without holding them."""
    try:
        with path.open(encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _jsonl_samples(path: Path) -> Iterator[Sample]:
    base = str(path.parent.resolve())
    try:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path.name}:{n}"
                try:
                    yield Sample(where, base, json.loads(line))
                except json.JSONDecodeError as exc:
                    yield Sample(where, base, None, f"not valid JSON: {exc.msg} at column {exc.colno}")
    except (OSError, UnicodeDecodeError) as exc:  # changed since it was counted
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _json_sample(path: Path) -> Sample:
    base = str(path.parent.resolve())
    try:
        return Sample(path.name, base, json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Sample(path.name, base, None, f"cannot read the record: {exc}")


def samples(root: Path) -> tuple[int, Iterator[Sample]]:
    """The number of samples under ``root`` and an iterator over them (a ``.json`` file is one record,
    every non-empty line of any other file is one), read a line at a time."""
    files = _files(root)
    total = sum(1 if path.suffix.lower() == ".json" else _count_lines(path) for path in files)

    def gen() -> Iterator[Sample]:
        for path in files:
            if path.suffix.lower() == ".json":
                yield _json_sample(path)
            else:
                yield from _jsonl_samples(path)

    return total, gen()


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(sample_id: str) -> str:
    """A file name for a sample id: runs of characters outside ``[A-Za-z0-9._-]`` become ``_``."""
    stem = _UNSAFE.sub("_", sample_id).strip("._")
    return stem[:200] or "sample"


def _write(out_dir: Path, stem: str, fmt: str, positions: Any, model: str) -> str:
    name = f"{stem}.{'mrpg' if fmt == 'program' else fmt}"
    if fmt == "program":
        (out_dir / name).write_bytes(positions.program().to_bytes())
    elif fmt == "npy":
        with (out_dir / name).open("wb") as f:
            np.save(f, positions.ids, allow_pickle=False)
    else:
        (out_dir / name).write_text(json.dumps(positions_document(positions, model)) + "\n", encoding="utf-8")
    return name


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


@dataclass(frozen=True)
class Task:
    """One sample to compute: the sample, its id and the stem of its output file."""

    sample: Sample
    sample_id: str
    stem: str


@dataclass(frozen=True)
class Outcome:
    """What a worker computed for one sample.

    Attributes:
        sample_id, where: the sample's id and ``file:line``.
        fields: the manifest entry's fields (``file``, ``num_tokens``, the grids, ``media``: each image's
            and video's record, ``error``, ...).
        payload: the parquet row (:func:`mrope._result_rows.result_row`) or the packing item
            ``(positions, labels)``; ``None`` for a file-per-sample format or a failure.
        job_error: the message of an error that stops the whole job (every later sample would fail alike).
    """

    sample_id: str
    where: str
    fields: dict[str, Any] = field(default_factory=dict)
    payload: Any = None
    job_error: str = ""


@dataclass(frozen=True)
class Job:
    """The options every sample of a batch is computed with; called on a :class:`Task` (in a worker
    process with ``--workers``), it returns the sample's :class:`Outcome` (writing its ``.npy`` / ``.json``
    file for those formats)."""

    pre: Preprocessor
    fmt: str
    out_dir: Path
    pack: bool
    pattern: tuple[str, ...] = ()

    def __call__(self, task: Task) -> Outcome:
        sample = task.sample
        at = (task.sample_id, sample.where)
        try:
            if sample.problem:  # unreadable, or its id reused: the record's fault (invalid_request)
                raise RecordError(sample.problem)
            pre = self.pre.with_options(base_dir=sample.base_dir)
            payload: Any = None
            sets = None
            if self.pack:
                p, labels, sets = pre.checked_sets(sample.record)
                payload, name = (p, labels, sets), PACKED
            elif self.fmt == "parquet":  # the columns are the job's: checked_sets checks they hold it
                p, labels, sets = pre.checked_sets(sample.record)
                row = result_row(p, input_ids=True, labels=labels, sets=sets, pattern=self.pattern)
                payload, name = row, PARQUET
            elif pre.layer_sets is not None:
                p, _, sets = pre.checked_sets(sample.record)
                name = f"{task.stem}.{self.fmt}"
                save_sets(sets, self.pattern, p.rules.name, str(self.out_dir / name))  # type: ignore[arg-type]
            else:
                p = pre.positions(sample.record)
                name = _write(self.out_dir, task.stem, self.fmt, p, p.rules.name)
        except JobError as exc:
            return Outcome(*at, job_error=str(exc))
        except Exception as exc:  # one sample's failure never stops the batch
            return Outcome(*at, {"file": None, "error": describe_error(exc), "error_code": error_code(exc)})
        return Outcome(
            *at,
            {
                "file": name,
                "num_tokens": p.num_tokens,
                "delta": float(p.delta) if p.ids.dtype.kind == "f" else int(p.delta),
                "image_grid_thw": p.image_grid_thw.tolist(),
                "video_grid_thw": p.video_grid_thw.tolist(),
                "second_per_grid_ts": p.second_per_grid_ts.tolist(),
                "media": media_items(p),
                "error": "",
                "error_code": "",
                **({} if sets is None else {"set_deltas": [float(q.delta) for q in sets.values()]}),
            },
            payload,
        )


def _tasks(stream: Iterator[Sample]) -> Iterator[Task]:
    """The samples as tasks, each with a unique output stem: one whose stem an earlier sample took gets
    that as its problem (so it fails without being computed)."""
    used: dict[str, str] = {}
    for sample in stream:
        record = sample.record
        raw_id = record.get("id") if isinstance(record, dict) else None
        sample_id = sample.default_id() if raw_id is None else str(raw_id)
        stem = file_stem(sample_id)
        if stem in used and not sample.problem:
            problem = f"its output name {stem!r} is taken by sample {used[stem]!r} (ids must be unique)"
            sample = Sample(sample.where, sample.base_dir, None, problem)
        elif not sample.problem:
            used[stem] = sample_id
        yield Task(sample, sample_id, stem)


def _keep(outcome: Outcome, table: ParquetRows | None, packed: PackedRows | None) -> dict[str, Any]:
    """Add one sample's outcome to the Parquet rows or the samples to pack; returns its manifest entry
    (a sample too long for ``--pack`` fails here)."""
    entry = {"id": outcome.sample_id, "source": outcome.where, "file": None, **outcome.fields}
    if packed is not None and not entry["error"]:
        try:
            packed.add(outcome.sample_id, *outcome.payload)
        except MRopeError as exc:
            entry = {**entry, "file": None, "error": describe_error(exc), "error_code": error_code(exc)}
            for key in ("num_tokens", "delta", "image_grid_thw", "video_grid_thw", "second_per_grid_ts"):
                entry.pop(key, None)
    if entry["error"]:
        if table is not None:
            table.failed(outcome.sample_id, outcome.where, entry["error"], entry["error_code"])
        if packed is not None:
            packed.failed(outcome.sample_id, entry["error"], entry["error_code"])
    elif table is not None:
        table.add(outcome.sample_id, outcome.where, outcome.payload)
    return entry


def _preprocessor(args: argparse.Namespace, fmt: str) -> Preprocessor:
    return Preprocessor(
        model=None
        if args.model is None and args.model_dir is None
        else model_from_args(args.model, None, args.model_dir),
        rules=rule_overrides(args.rule) or None,
        tokenizer=tokenizer_from_arg(args.tokenizer),
        max_tokens=max_tokens_from_arg(args.max_tokens),
        decode_check=args.decode_check,
        labels=fmt == "parquet",
        layer_sets=True if args.layer_sets else None,
        **data_options(args),
    )


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM during a batch, noted by the handler and acted on between samples
    (:meth:`check` raises ``KeyboardInterrupt``), never inside the writer or the worker pool, so the
    ``finally`` that writes ``samples.parquet``'s last row group and footer always runs (exit code 130).
    A second signal stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt


@contextmanager
def stop_between_samples() -> Iterator[StopRequest]:
    """A :class:`StopRequest` that handles SIGINT and SIGTERM while the batch runs (signals reach the
    main thread only: elsewhere it notes nothing and the default handling stays)."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    fmt = output_format(args)
    workers = positive_int(args.workers, "--workers")
    row_group = positive_int(args.row_group, "--row-group")
    root = Path(args.input)
    total, stream = samples(root)
    if total == 0:
        raise CliError(f"{root} holds no samples")
    out_dir = Path(args.out_dir)
    if args.layer_sets and fmt == "program":
        raise CliError("--layer-sets has no --format program: a position program holds one set")
    try:
        base = _preprocessor(args, fmt)
        sets = base.job_sets
    except JobError as exc:  # layer_sets without a job-level model
        raise CliError(str(exc)) from None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        manifest = (out_dir / MANIFEST).open("w", encoding="utf-8", buffering=1)  # a line at a time
    except OSError as exc:
        raise CliError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None
    packed = None
    if args.pack is not None:  # float32 positions when the job's model keeps fractional time
        cp = None if args.cp_size is None else (args.cp_size, args.cp_layout)
        packed = PackedRows(out_dir / PACKED, args.pack, args.pack_mode, base.fractional, cp, sets)
    table = None
    if fmt == "parquet" and packed is None:
        table = ParquetRows(
            out_dir / PARQUET, row_group, base.fractional, None if sets is None else sets.dtype
        )
    job = Job(base, fmt, out_dir, packed is not None, () if sets is None else sets.pattern)
    failed: list[str] = []
    try:
        with (
            manifest,
            stop_between_samples() as stop,
            progress(total, "mrope batch", quiet=args.quiet) as bar,
        ):
            for outcome in ordered_map(job, _tasks(stream), workers):
                stop.check()
                if outcome.job_error:  # every later sample would fail alike: stop now, naming the option
                    raise CliError(f"sample {outcome.sample_id!r} ({outcome.where}): {outcome.job_error}")
                entry = _keep(outcome, table, packed)
                if entry["error"]:
                    failed.append(outcome.sample_id)
                    bar.write(
                        f"mrope batch: sample {outcome.sample_id!r} ({outcome.where}) failed: {entry['error']}"
                    )
                manifest.write(json.dumps(entry) + "\n")
                bar.update()
    finally:
        if table is not None:
            table.close()
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
