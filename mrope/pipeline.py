"""Records -> positions, for preprocessing at scale (a plain loop, Hugging Face ``datasets``, Ray Data).

A record is a dict with an ``id`` and either

- ``segments``: the JSON segments of ``POST /v1/positions`` (``{"type": "text", "tokens" | "ids" |
  "text": ...}``, ``{"type": "image", "grid" | "height"+"width", ...}``, ``{"type": "video", "grid", ...}``),
  plus media files: ``{"type": "image", "path": "cat.jpg", "tiling": true, "crop": [top, left, h, w]}``
  and ``{"type": "video", "path": "clip.mp4", "fps": 2.0 | "nframes": 16}``; or
- ``messages``: chat-style turns, ``[{"role": "user", "content": [{"type": "text", "text": "..."},
  {"type": "image", "image": "cat.jpg"}, {"type": "video", "video": "clip.mp4"}]}]``. Text needs a
  tokenizer for its token count, or a ``"tokens": n`` count in the item.

Records are validated by :class:`mrope.schema.Record`, the one JSON definition every face reads.
Optional ``model`` and ``rules`` keys in a record are used when the job does not set them (the job's
``model`` or ``model_dir`` wins; the job's ``rules`` overrides are applied over the record's); a model is
required, there is no default. Media paths are local files (relative ones resolved against
``base_dir``, which may also be a URL prefix), URLs (``s3://``, ``gs://``, ``https://``, ...) or
``data:`` URIs, as ``media_access`` allows. Keys that are ``None`` count as absent, because Arrow fills every struct
field that any row has (a JSONL read by ``datasets`` or Ray gives an image item a ``"tokens": None``).

Entry points:

- :func:`record_positions`: one record -> :class:`mrope.Positions` (raises on bad input).
- :func:`process_record`: one record -> a dict of Arrow-friendly columns, with the failure (if any) in
  ``error`` (``""`` on success): the function for ``datasets.Dataset.map``.
- :func:`process_batch`: a batch (dict of columns, pandas frame or Arrow table) -> a ``pyarrow.Table``:
  the function for ``ray.data.Dataset.map_batches``.
- :class:`Preprocessor` holds the options once (its :meth:`~Preprocessor.record` and
  :meth:`~Preprocessor.batch` are the two functions above, bound to them).

Nothing here raises through a whole job: a record that fails gets empty positions and its message.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope import arrow, schema
from mrope._deprecated import moved_names
from mrope.builder import build_positions, count_tokens
from mrope.caches import cached
from mrope.chat import find_chat_template
from mrope.errors import MRopeError
from mrope.models import resolve_rules
from mrope.packing.table import (
    PACKED_COLUMNS,
    PackItem,
    SampleTooLong,
    check_fits,
    pack_efficiency,
    packed_schema,
    packed_table,
)
from mrope.positions import Positions
from mrope.rules import LayoutRules
from mrope.schema import MediaAccess, Record, RequestError
from mrope.segments import Segment

if TYPE_CHECKING:
    import pyarrow as pa

QWEN_TURN = ("<|im_start|>{role}\n", "<|im_end|>\n")
"""The Qwen chat template's turn wrapper, for ``turn_format``; the generation prompt is
``"<|im_start|>assistant\\n"``."""

RESULT_COLUMNS = ("positions", "delta", *arrow.SEQUENCE_COLUMNS, *arrow.ERROR_COLUMNS)
"""The columns :func:`process_record` returns (plus ``input_ids`` and ``labels`` when asked for, and
``generation_ids`` in a job whose model generates images: :attr:`Preprocessor.generates_images`).
``error_code`` is a stable machine-readable name of the failure (:func:`error_code`), ``""`` on
success."""


class JobError(RequestError):
    """A failure of the whole job, not of one record: a missing option every such record would need (no
    tokenizer for text: a record cannot carry one). :meth:`Preprocessor.batch` and ``mrope batch``
    raise it at once instead of recording the same error in every row.

    Attributes:
        option: the option that fixes it (``"tokenizer"``, ``"chat_template"``).
    """

    def __init__(self, message: str, option: str, code: str = "job_error") -> None:
        super().__init__(message)
        self.option = option
        self.code = code


DEFAULT_MAX_TOKENS = 1 << 24
"""Most tokens one record may make by default (16,777,216: 400 MB of int64 positions)."""


RecordError = RequestError
"""A record that does not have the documented shape (the schema's :class:`mrope.schema.RequestError`)."""


class ModelRequired(RecordError):
    """A record without a model in a job without one."""

    code = "model_required"


class TooManyTokens(RecordError):
    """A record that makes more tokens than ``max_tokens``."""

    code = "too_many_tokens"


# ------------------------------------------------------------------------------------------ values


def plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars turned into Python lists and numbers, recursively.

    Records read through Arrow (``datasets``, Ray) hold numpy arrays where the JSON had lists, and a
    numpy batch holds NaN where an int field was null (absent) in that row: NaN becomes ``None``.
    """
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


@cached("pipeline.checkpoints", maxsize=4)
def _checkpoint(path: str) -> Any:
    from mrope.checkpoint import from_pretrained

    return from_pretrained(path)


# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class Preprocessor:
    """The options of a preprocessing job, and its per-record and per-batch functions.

    Attributes:
        model: the model (a name, a Hugging Face ``model_type`` or repo id, or what
            :func:`mrope.from_pretrained` returns); ``None`` takes each record's ``model``. One of the
            two is required: there is no default model.
        model_dir: a checkpoint folder instead of ``model``, read by :func:`mrope.from_pretrained` once per
            worker process (a path travels to Ray and ``datasets`` workers; a loaded model may not pickle).
        rules: a :class:`LayoutRules`, or a dict of overrides applied over each record's ``rules``.
        tokenizer: a ``tokenizer.json`` path (loaded once per worker process), a ``tokenizers.Tokenizer``,
            a transformers tokenizer or a callable ``str -> list[int]``; needed for text given as a string
            and for Qwen3-VL / GLM-4.1V video timestamps.
        base_dir: folder that relative media paths are resolved against (default: the working directory).
        turn_format, generation_prompt: chat wrapping of ``messages`` (see
            :func:`mrope.schema.message_segments`).
        input_ids: also return the ``input_ids`` column (the token ids the model would see).
        keep: input columns that :meth:`batch` copies to its output (those every row has); ``None``
            (the default): every input column, as ``datasets.Dataset.map`` keeps them, so a Ray job
            and a datasets job give the same columns.
        max_tokens: a record that would make more tokens fails (counted before any array is allocated,
            so a grid typo cannot exhaust a worker's memory); ``None``: no limit.
        convention: ``"released"`` (the official semantics) or ``"transformers5"`` (the family's own
            transformers 5.24 ``get_rope_index``); a record's ``convention`` is used when this is ``None``.
        frame_size: ``"display"`` or ``"coded"``: which frames of a video file the model gets
            (:func:`mrope.media.load_video`); a video's own ``frame_size`` wins.
        chat_template: how ``messages`` become text. ``"auto"`` (the default): the chat template of the
            job's checkpoint or tokenizer (``model_dir``, a tokenizer path's folder, a transformers
            tokenizer's ``chat_template``; see :func:`mrope.chat.find_chat_template`) when there is one
            and ``turn_format`` is not set, else the plain turns; a template string or a path to one;
            ``None``: never a template.
        add_generation_prompt: with a chat template, end with the assistant's generation prompt.
        labels: also return ``labels [T]`` (the token id on the assistant's tokens, -100 elsewhere)
            and ``assistant_mask [T]``.
        decode_check: decode each media file's pixels (images whole, a video's first and last frame),
            so a truncated file is an error row (``error_code`` ``"media_decode_failed"``) here rather
            than in the model's processor.
        media_access: what a record's media ``path`` may name (:class:`mrope.schema.MediaAccess`); by
            default local files, URLs and ``data:`` URIs (``MediaAccess(urls=True, url_hosts=...)``
            restricts a job over untrusted records to some hosts, ``mrope.schema.MEDIA_NONE`` to none).
        pack: a row length: :meth:`batch` then packs the batch's samples with :func:`mrope.pack` into
            rows of at most ``pack`` tokens and returns the packed rows (:func:`packed_schema`) instead
            of one row per record; ``pack_mode`` is ``"ffd"`` (first-fit-decreasing) or ``"stream"``
            (order-keeping). See docs/packing.md.
    """

    model: Any = None
    model_dir: str | os.PathLike[str] | None = None
    rules: LayoutRules | Mapping[str, Any] | None = None
    tokenizer: Any = None
    base_dir: str | os.PathLike[str] | None = None
    turn_format: tuple[str, str] | None = None
    generation_prompt: str | None = None
    input_ids: bool = False
    keep: tuple[str, ...] | None = None
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    media_access: MediaAccess | None = None
    convention: str | None = None
    frame_size: str = "display"
    chat_template: Any = "auto"
    add_generation_prompt: bool = False
    labels: bool = False
    decode_check: bool = False
    pack: int | None = None
    pack_mode: str = "ffd"

    def rules_for(self, record: Record | Mapping[str, Any]) -> LayoutRules:
        """The layout rules of one record: the job's model and overrides over the record's. A model is
        required (the job's or the record's): there is no default model."""
        if not isinstance(record, Record):
            record = schema.parse_record(plain(record))
        convention = self.convention or record.convention or "released"
        if isinstance(self.rules, LayoutRules):
            if convention == "released":
                return self.rules
            return resolve_rules(self.job_model() or record.model, self.rules, convention)
        job = self.job_model()
        if job is None and record.model is None:  # a record may carry its own model: not the job's failure
            raise ModelRequired(
                f"no model: pass model= to the job (on the command line: --model or --model-dir), or give "
                f"every record a 'model'; name one of {', '.join(schema.model_names())}"
            )
        model = schema.require_model(job if job is not None else record.model, "model=")
        merged = {**(schema.rules_dict(record.rules) or {}), **dict(self.rules or {})}
        return resolve_rules(model, merged or None, convention)

    @property
    def fractional(self) -> bool:
        """Whether this job's positions are float32 (its model's rules keep fractional time, Qwen3-Omni).
        The Arrow column types are fixed per job, so only a job-level model (or full rules) decides it."""
        rules = self._job_rules("time_rounding")
        return rules is not None and rules.fractional_time

    @property
    def generates_images(self) -> bool:
        """Whether this job's rows carry a ``generation_ids`` column, int64 ``[3, n + 1]``: the decode-time
        positions of the images a record asks the model to generate (GLM-Image, ``"generate": true``;
        ``[3, 0]`` for a record without any). Like :attr:`fractional`, a job-level model decides it."""
        rules = self._job_rules("generates_images")
        return rules is not None and rules.generates_images

    def _job_rules(self, override: str) -> LayoutRules | None:
        """The job-level model's rules with only the job's override of field ``override`` applied (the
        one field the caller's property depends on), or the job's full ``rules``; ``None`` without
        either (the column types are fixed per job, so a record's own model cannot decide them)."""
        if isinstance(self.rules, LayoutRules):
            return self.rules
        model = self.job_model()  # model=, or the checkpoint of model_dir=
        if model is None:
            return None
        overrides = dict(self.rules) if isinstance(self.rules, Mapping) else {}
        kept = {k: v for k, v in overrides.items() if k == override}
        return resolve_rules(model, kept or None)

    def media(self) -> MediaAccess:
        """What records may read: ``media_access``, by default local files (relative to ``base_dir``),
        URLs and ``data:`` URIs."""
        if self.media_access is not None:
            return self.media_access
        return MediaAccess.everything(self.base_dir)

    def segments(self, record: Mapping[str, Any]) -> tuple[list[Segment], LayoutRules]:
        """The library segments of one record (media files are read here) and its layout rules.

        The record is validated by :class:`mrope.schema.Record`, the one definition every face uses.
        """
        chat, rules = self.chat(record)
        return chat.segments, rules

    def chat(self, record: Mapping[str, Any]) -> tuple[schema.ChatSegments, LayoutRules]:
        """The library segments of one record with its assistant-token masks
        (:class:`mrope.schema.ChatSegments`), and its layout rules."""
        parsed = schema.parse_record(plain(record) if isinstance(record, Mapping) else record)
        rules = self.rules_for(parsed)
        reader = schema.SegmentReader(
            rules,
            tokenizer=self.tokenizer_for(),
            media=self.media(),
            frame_size=self.frame_size,
            decode_check=self.decode_check,
        )
        try:
            if parsed.segments is not None:
                segments = reader.segments(parsed.segments)
                return schema.ChatSegments(segments, [None] * len(segments)), rules
            template = self.template_for()
            if template is not None:
                chat = schema.template_segments(
                    parsed.messages or [], reader, template, add_generation_prompt=self.add_generation_prompt
                )
            else:
                chat = schema.turn_segments(
                    parsed.messages or [],
                    reader,
                    turn_format=self.turn_format,
                    generation_prompt=self.generation_prompt,
                )
        except schema.TokenizerRequired as exc:
            if reader.tokenizer is None:  # every record with text fails alike: the job stops here
                raise JobError(
                    f"{exc.where}: text needs a tokenizer to count its tokens, and this job has none: pass "
                    "tokenizer= (on the command line: --tokenizer), a checkpoint with a tokenizer.json "
                    "(model_dir=, --model-dir), or give text as 'tokens' counts",
                    "tokenizer",
                    "tokenizer_required",
                ) from None
            raise
        return chat, rules

    def template_for(self) -> str | None:
        """The chat template ``messages`` are rendered with (see ``chat_template``), or ``None``."""
        choice = self.chat_template
        if choice is None or choice is False:
            return None
        if choice != "auto":
            if isinstance(choice, str) and ("{%" in choice or "{{" in choice):
                return choice
            found = find_chat_template(choice)
            if found is None:
                raise JobError(
                    f"chat_template={choice!r} holds no chat template (a .jinja file, or a folder with "
                    "chat_template.jinja / chat_template.json / tokenizer_config.json)",
                    "chat_template",
                    "chat_template_missing",
                )
            return found
        if self.turn_format is not None or self.generation_prompt is not None:
            return None
        checkpoint = getattr(self.model, "source", None)  # mrope.from_pretrained(folder) keeps its folder
        if not (isinstance(checkpoint, str) and os.path.isdir(checkpoint)):
            checkpoint = None
        for source in (self.tokenizer, self.model_dir, checkpoint):
            if source is None:
                continue
            found = _template_of(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else None
            if found is None and not isinstance(source, (str, os.PathLike)):
                found = find_chat_template(source)
            if found is not None:
                return found
        return None

    def job_model(self) -> Any:
        """The job's model: ``model``, or the checkpoint of ``model_dir`` (loaded once per process)."""
        if self.model_dir is None:
            return self.model
        if self.model is not None:
            raise RecordError("give model= or model_dir=, not both")
        return _checkpoint(os.fspath(self.model_dir))

    def tokenizer_for(self) -> Any:
        """The job's tokenizer, else the checkpoint's (``model=mrope.from_pretrained(folder)`` with a
        ``tokenizer.json``), else ``None``."""
        if self.tokenizer is not None:
            return schema.load_tokenizer(self.tokenizer)
        return getattr(self.job_model(), "tokenizer", None)

    def build(self, segments: Sequence[Segment], rules: LayoutRules) -> Positions:
        """Positions of ``segments``, after checking their token count against ``max_tokens``."""
        tokenizer = self.tokenizer_for()
        if self.max_tokens is not None:
            n = count_tokens(segments, rules=rules, tokenizer=tokenizer)
            if n > self.max_tokens:
                raise TooManyTokens(
                    f"the sequence makes {n:,} tokens, over max_tokens={self.max_tokens:,} (a grid typo?); "
                    "raise max_tokens (on the command line: --max-tokens) to build it"
                )
        return build_positions(segments, rules=rules, tokenizer=tokenizer)

    def positions(self, record: Mapping[str, Any]) -> Positions:
        """The positions of one record (raises :class:`mrope.MRopeError` on bad input)."""
        return self.build(*self.segments(record))

    def sample(self, record: Mapping[str, Any]) -> tuple[Positions, np.ndarray]:
        """The positions of one record and its ``labels`` (int64 ``[T]``: the token id on the assistant's
        tokens, -100 elsewhere; all -100 for a ``segments`` record, which has no turns)."""
        chat, rules = self.chat(record)
        p = self.build(chat.segments, rules)
        return p, chat.labels(p)

    def checked_sample(self, record: Mapping[str, Any]) -> tuple[Positions, np.ndarray | None]:
        """The positions of one record and its ``labels`` (``None`` unless the job asks for labels), after
        checking that this job's columns can hold them (raises on bad input)."""
        p, labels = self.sample(record) if self.labels else (self.positions(record), None)
        if p.ids.dtype.kind == "f" and not self.fractional:
            raise RecordError(
                f"the {p.rules.name!r} rules give fractional (float32) positions, but this job's columns are "
                "int64: run such records in a job whose model= is that model"
            )
        if p.generation_ids is not None and not self.generates_images:
            raise RecordError(
                f"the record has images to generate, whose decode-time positions (generation_ids) this "
                f"job has no column for: run such records in a job whose model= is {p.rules.name!r}"
            )
        return p, labels

    def record(self, record: Mapping[str, Any], *, stop_on_job_error: bool = False) -> dict[str, Any]:
        """One record -> ``{positions int64 [3, T], delta, num_tokens, image_grid_thw [n, 3],
        video_grid_thw [m, 3], second_per_grid_ts [m], error}`` (plus ``input_ids [T]`` when asked for, and
        ``generation_ids [3, g]`` when the job :attr:`generates_images`).

        A failure gives empty arrays, ``delta = num_tokens = 0``, the message in ``error`` (``""`` on
        success, so the column is a string column from the first row on) and its code in ``error_code``.
        A :class:`JobError` (no tokenizer for text) is raised instead with
        ``stop_on_job_error`` (what :meth:`batch` and ``mrope batch`` do: every later record would fail
        alike).
        """
        try:
            p, labels = self.checked_sample(record)
            return result_row(p, input_ids=self.input_ids, generation=self.generates_images, labels=labels)
        except JobError as exc:
            if stop_on_job_error:
                raise  # the whole job's failure: stop at once, naming the option
            return self._failed(exc)
        except Exception as exc:  # recorded per record, never raised through the job
            return self._failed(exc)

    def _failed(self, exc: BaseException) -> dict[str, Any]:
        return error_row(
            describe_error(exc),
            input_ids=self.input_ids,
            fractional=self.fractional,
            generation=self.generates_images,
            labels=self.labels,
            code=error_code(exc),
        )

    def batch(self, batch: Any) -> pa.Table:
        """A batch (dict of columns, pandas ``DataFrame`` or ``pyarrow.Table``) -> a ``pyarrow.Table`` of
        the ``keep`` columns and the :meth:`record` columns, one row per input row, types fixed by
        :func:`arrow_schema` (so every batch of a Ray job has the same schema). A :class:`JobError`
        stops it (and the job). With ``pack``: the packed rows of the batch (:meth:`packed`)."""
        if self.pack is not None:
            return self.packed(batch)
        records = batch_records(batch)
        rows = [self.record(r, stop_on_job_error=True) for r in records]
        return rows_to_table(
            rows,
            records,
            keep=self.keep,
            input_ids=self.input_ids,
            fractional=self.fractional,
            generation=self.generates_images,
            labels=self.labels,
        )

    def packed(self, batch: Any) -> pa.Table:
        """A batch (as :meth:`batch` takes, or a list of records) -> a ``pyarrow.Table`` of packed rows
        (:func:`packed_table`): the batch's samples packed by :func:`mrope.pack` into rows of at most
        ``pack`` tokens, then one error row per record that failed (or is longer than ``pack``). The
        ``samples`` column holds indices into the batch. A :class:`JobError` stops it (and the job)."""
        if self.pack is None:
            raise RecordError("packed() needs pack= (the row length in tokens)")
        records = batch_records(batch)
        samples: list[PackItem] = []
        for record in records:
            try:
                samples.append(self.checked_sample(record))
            except JobError:
                raise  # the whole job's failure: stop at once, naming the option
            except Exception as exc:  # recorded per record, never raised through the job
                samples.append((describe_error(exc), error_code(exc)))
        ids = [str(r["id"]) if r.get("id") is not None else str(i) for i, r in enumerate(records)]
        return packed_table(
            samples,
            ids=ids,
            max_length=self.pack,
            mode=self.pack_mode,
            labels=self.labels,
            fractional=self.fractional,
        )

    def with_options(self, **changes: Any) -> Preprocessor:
        """A copy with some options changed."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"unknown Preprocessor options {sorted(unknown)}")
        return replace(self, **changes)


def error_code(exc: BaseException) -> str:
    """The stable machine-readable code of a failed record: the error type's ``code`` (``invalid_media``,
    ``media_decode_failed``, ``layout_error``, ``token_error``, ``invalid_request``,
    ``tokenizer_required``, ``too_many_tokens``, ...), ``internal_error`` for an unexpected exception."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else "internal_error"


@cached("pipeline.chat_templates", maxsize=16)
def _template_of(path: str) -> str | None:
    return find_chat_template(path)


def describe_error(exc: BaseException) -> str:
    """One line for a failed record: the library's message, or the exception type and message."""
    text = " ".join(str(exc).split())
    if isinstance(exc, MRopeError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def result_row(
    p: Positions, *, input_ids: bool = False, generation: bool = False, labels: np.ndarray | None = None
) -> dict[str, Any]:
    """The columns of a successful record (``generation``: with ``generation_ids``, ``[3, 0]`` when the
    record has no image to generate; ``labels``: with ``labels`` and ``assistant_mask``)."""
    row: dict[str, Any] = {
        "positions": p.ids,
        "delta": float(p.delta) if p.ids.dtype.kind == "f" else int(p.delta),
        "num_tokens": int(p.num_tokens),
        "image_grid_thw": p.image_grid_thw,
        "video_grid_thw": p.video_grid_thw,
        "second_per_grid_ts": p.second_per_grid_ts,
        "error": "",
        "error_code": "",
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
    return row


def error_row(
    message: str,
    *,
    input_ids: bool = False,
    fractional: bool = False,
    generation: bool = False,
    labels: bool = False,
    code: str = "internal_error",
) -> dict[str, Any]:
    """The columns of a failed record: empty arrays of the right shapes and dtypes, the message and its
    code."""
    row: dict[str, Any] = {
        "positions": np.zeros((3, 0), dtype=np.float32 if fractional else np.int64),
        "delta": 0,
        "num_tokens": 0,
        "image_grid_thw": np.zeros((0, 3), dtype=np.int64),
        "video_grid_thw": np.zeros((0, 3), dtype=np.int64),
        "second_per_grid_ts": np.zeros(0, dtype=np.float64),
        "error": message or "failed",
        "error_code": code,
    }
    if input_ids:
        row["input_ids"] = np.zeros(0, dtype=np.int64)
    if labels:
        row["labels"] = np.zeros(0, dtype=np.int64)
        row["assistant_mask"] = np.zeros(0, dtype=np.int8)
    if generation:
        row["generation_ids"] = np.zeros((3, 0), dtype=np.int64)
    return row


# -------------------------------------------------------------------------------------------- Arrow


def arrow_schema(
    *, input_ids: bool = False, fractional: bool = False, generation: bool = False, labels: bool = False
) -> pa.Schema:
    """The Arrow types of the result columns (``fractional``: float32 positions and a float64 delta, for
    a job whose model keeps fractional time; ``generation``: a ``generation_ids`` column, for a job whose
    model generates images)."""
    import pyarrow as pa

    cols = [
        ("positions", arrow.positions_type(fractional)),
        ("delta", pa.float64() if fractional else pa.int64()),
        *arrow.sequence_fields(),
        *arrow.error_fields(),
    ]
    if input_ids:
        cols.append(("input_ids", pa.list_(pa.int64())))
    if labels:
        cols += [("labels", pa.list_(pa.int64())), ("assistant_mask", pa.list_(pa.int8()))]
    if generation:
        cols.append(("generation_ids", arrow.positions_type()))
    return pa.schema(cols)


def _missing(value: Any) -> bool:
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


def rows_to_table(
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]] = (),
    *,
    keep: Sequence[str] | None = None,
    input_ids: bool = False,
    fractional: bool = False,
    generation: bool = False,
    labels: bool = False,
) -> pa.Table:
    """Result rows (from :func:`process_record`) as a ``pyarrow.Table`` with :func:`arrow_schema` types,
    after the ``keep`` columns copied from ``records`` (those every record has; ``None``: all of them, in
    the first record's order; an input column named like a result column is replaced by the result)."""
    import pyarrow as pa

    schema = arrow_schema(input_ids=input_ids, fractional=fractional, generation=generation, labels=labels)
    columns: dict[str, pa.Array] = {}
    names = list(records[0]) if keep is None and records else list(keep or ())
    for name in names:
        if name in schema.names:
            continue
        if records and all(name in r for r in records):
            columns[name] = pa.array([plain(r[name]) for r in records])
    columns.update({f.name: arrow.typed_column([row[f.name] for row in rows], f.type) for f in schema})
    return pa.table(columns)


# --------------------------------------------------------------------------------------- functions


def record_positions(record: Mapping[str, Any], **options: Any) -> Positions:
    """The positions of one record; ``options`` are :class:`Preprocessor` fields. Raises on bad input."""
    return Preprocessor(**options).positions(record)


def process_record(record: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """One record -> result columns, errors recorded in ``error`` (for ``datasets.Dataset.map``).

    ``options`` are :class:`Preprocessor` fields, e.g.
    ``ds.map(process_record, fn_kwargs={"model": "qwen2.5-vl", "base_dir": root})``.
    """
    return Preprocessor(**options).record(record)


def process_batch(batch: Any, **options: Any) -> pa.Table:
    """A batch -> a ``pyarrow.Table`` of ``id`` and the result columns (for Ray Data ``map_batches``).

    ``options`` are :class:`Preprocessor` fields, e.g.
    ``ds.map_batches(process_batch, fn_kwargs={"model": "qwen2.5-vl"}, batch_format="pandas")``.
    """
    return Preprocessor(**options).batch(batch)


def pack_batch(batch: Any, *, max_length: int, **options: Any) -> pa.Table:
    """A batch of records -> a ``pyarrow.Table`` of packed rows (:meth:`Preprocessor.packed`), packed
    within the batch: the function for Ray Data ``map_batches``, ``datasets.Dataset.map(batched=True)``
    (with ``remove_columns``: the rows change) and a plain loop (a list of records). ``options`` are
    :class:`Preprocessor` fields (``pack_mode="stream"`` keeps the order), e.g.
    ``ds.map_batches(pack_batch, fn_kwargs={"max_length": 4096, "model": "qwen2.5-vl"})``."""
    return Preprocessor(**options, pack=max_length).packed(batch)


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "JobError",
    "PACKED_COLUMNS",
    "PackItem",
    "SampleTooLong",
    "check_fits",
    "pack_batch",
    "pack_efficiency",
    "packed_schema",
    "packed_table",
    "ModelRequired",
    "QWEN_TURN",
    "RESULT_COLUMNS",
    "Preprocessor",
    "RecordError",
    "TooManyTokens",
    "arrow_schema",
    "batch_records",
    "describe_error",
    "error_code",
    "error_row",
    "plain",
    "whole_floats_as_ints",
    "process_batch",
    "process_record",
    "record_positions",
    "result_row",
    "rows_to_table",
]

__getattr__ = moved_names(
    __name__, {"load_tokenizer": (schema.load_tokenizer, "mrope.schema.load_tokenizer")}
)
