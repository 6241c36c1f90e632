"""Records -> positions, for preprocessing at scale (a plain loop, Hugging Face ``datasets``, Ray Data).

A record is a dict with an ``id`` and either

- ``segments``: the JSON segments of ``POST /v1/positions`` (``{"type": "text", "tokens" | "ids" |
  "text": ...}``, ``{"type": "image", "grid" | "height"+"width", ...}``, ``{"type": "video", "grid", ...}``),
  plus media files: ``{"type": "image", "path": "cat.jpg", "tiling": true, "crop": [top, left, h, w]}``
  and ``{"type": "video", "path": "clip.mp4", "fps": 2.0 | "nframes": 16}``; or
- ``messages``: chat-style turns, ``[{"role": "user", "content": [{"type": "text", "text": "..."},
  {"type": "image", "image": "cat.jpg"}, {"type": "video", "video": "clip.mp4"}]}]``. Text needs a
  tokenizer for its token count, or a ``"tokens": n`` count in the item.

Records are validated by :class:`mrope.schema.Record`, the one JSON definition every face reads; the
formats datasets come in (TRL's ``images`` + ``messages``, LLaVA's ``conversations``, Hugging Face
``Image()`` values, OpenAI's items) are read as the ``messages`` they stand for
(:mod:`mrope.schema._formats`), and media may be in memory (``bytes``, PIL images, numpy images ``[H, W,
C]`` and frames ``[T, H, W, C]`` ``uint8``).
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
The columns of a result row and their Arrow table are :mod:`mrope._result_rows`'s; a batch in any
shape becomes records through :func:`mrope._batches.batch_records`; the errors are
:class:`mrope._errors.RecordError` and its kinds (:class:`~mrope._errors.JobError`, ...).
"""

from __future__ import annotations

from mrope import _extras

_extras.require("mrope.pipeline", "pipeline", "pydantic", "pyarrow")

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope._batches import batch_records, plain
from mrope._builder import build_positions, count_tokens
from mrope._caches import cached
from mrope._chat import find_chat_template
from mrope._errors import JobError, ModelRequired, MRopeError, RecordError, TooManyTokens
from mrope._job_sets import JobSets, asked_sets, job_sets, record_sets
from mrope._positions import Positions
from mrope._result_rows import (
    RESULT_COLUMNS,
    describe_error,
    error_code,
    error_row,
    result_row,
    rows_to_table,
)
from mrope._rules import LayoutRules
from mrope._segments import Segment
from mrope.models import resolve_rules
from mrope.packing._table import PackItem, pack_efficiency, packed_table
from mrope.schema import MediaAccess, Record, parse_record
from mrope.schema import _text as schema_text
from mrope.schema._convert import SegmentReader
from mrope.schema._fields import model_names, require_model, rules_dict
from mrope.schema._messages import ChatSegments, template_segments, turn_segments
from mrope.schema._text import TokenizerRequired

if TYPE_CHECKING:
    import pyarrow as pa

QWEN_TURN = ("<|im_start|>{role}\n", "<|im_end|>\n")
"""The Qwen chat template's turn wrapper, for ``turn_format``; the generation prompt is
``"<|im_start|>assistant\\n"``."""

DEFAULT_MAX_TOKENS = 1 << 24
"""Most tokens one record may make by default (16,777,216: 400 MB of int64 positions)."""


@cached("pipeline.checkpoints", maxsize=4)
def _checkpoint(path: str) -> Any:
    """The checkpoint folder ``path`` read by :func:`mrope.from_pretrained`, once per process."""
    from mrope._checkpoint import from_pretrained

    return from_pretrained(path)


@cached("pipeline.chat_templates", maxsize=16)
def _template_of(path: str) -> str | None:
    """The chat template found at ``path`` (cached: a job asks once per record)."""
    return find_chat_template(path)


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
        input_ids: whether rows carry the ``input_ids`` column (the token ids the model would see);
            ``None`` (the default): when the job has a tokenizer (``tokenizer=``, or the checkpoint's).
        keep: input columns that :meth:`batch` copies to its output (those every row has); by default only
            ``id``. Other input columns are not carried, as their values may not fit one Arrow type (a chat
            JSONL whose ``content`` is a string in one turn and a list in another cannot be one column);
            name the ones a job wants, e.g. ``keep=("id", "source")``.
        max_tokens: a record that would make more tokens fails (counted before any array is allocated,
            so a grid typo cannot exhaust a worker's memory); ``None``: no limit.
        convention: ``"released"`` (the official semantics) or ``"transformers5"`` (the family's own
            transformers 5.24 ``get_rope_index``); a record's ``convention`` is used when this is ``None``.
        frame_size: ``"display"`` or ``"coded"``: which frames of a video file the model gets
            (:func:`mrope.media.load_video`); a video's own ``frame_size`` wins; ``None`` (the default):
            the orientation of the route's video loader (``"display"`` but for decord on Matroska).
        route: whose pipeline reads the media (:mod:`mrope.models._routes`): ``"processor"``,
            ``"qwen-vl-utils"`` or ``"vllm"``; a record's ``route`` is used when this is ``None``, and
            ``"processor"`` when neither names one.
        chat_template: how ``messages`` become text. ``"auto"`` (the default): the chat template of the
            job's checkpoint or tokenizer (``model_dir``, a tokenizer path's folder, a transformers
            tokenizer's ``chat_template``; see :func:`mrope._chat.find_chat_template`) when there is one
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
            rows of at most ``pack`` tokens and returns the packed rows (:func:`mrope.packing._table.packed_schema`) instead
            of one row per record; ``pack_mode`` is ``"ffd"`` (first-fit-decreasing) or ``"stream"``
            (order-keeping). See docs/packing.md.
        program: rows also carry ``program``, the bytes of the record's position program
            (:meth:`mrope.PositionProgram.to_bytes`, what ``mrope batch --format program`` writes per
            sample; empty for a failed record); not with ``pack`` (a packed row holds several records).
        layer_sets: every position set of the job's model in each row (:mod:`mrope._job_sets`), as the
            request field ``layer_sets`` reads it: ``True`` (the model's own sets: ``circle-rope-age``'s
            circle and M-RoPE sets) or ``{"sets": {name: overrides}, "pattern": [...]}`` (the job's own,
            each after ``rules``). Rows then add ``position_sets`` (every set stacked, ``[S, 3, T]``;
            packed: ``[S, 1 + A, L]``), ``set_names``, ``set_deltas`` and ``layer_pattern``;
            ``positions`` is the first set. Needs a job-level model; not with ``program``.
    """

    model: Any = None
    model_dir: str | os.PathLike[str] | None = None
    rules: LayoutRules | Mapping[str, Any] | None = None
    tokenizer: Any = None
    base_dir: str | os.PathLike[str] | None = None
    turn_format: tuple[str, str] | None = None
    generation_prompt: str | None = None
    input_ids: bool | None = None
    keep: tuple[str, ...] = ("id",)
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    media_access: MediaAccess | None = None
    convention: str | None = None
    frame_size: str | None = None
    route: str | None = None
    chat_template: Any = "auto"
    add_generation_prompt: bool = False
    labels: bool = False
    decode_check: bool = False
    pack: int | None = None
    pack_mode: str = "ffd"
    program: bool = False
    layer_sets: Any = None

    def __post_init__(self) -> None:
        asked = asked_sets(self.layer_sets, self.model is not None or self.model_dir is not None)
        if asked is not None and self.program:  # a program holds one set
            raise JobError("program=True gives one position program a row; layer_sets, every set", "program")
        object.__setattr__(self, "layer_sets", asked)

    def rules_for(self, record: Record | Mapping[str, Any]) -> LayoutRules:
        """The layout rules of one record: the job's model and overrides over the record's. A model is
        required (the job's or the record's): there is no default model."""
        if not isinstance(record, Record):
            record = parse_record(plain(record))
        convention = self.convention or record.convention or "released"
        if isinstance(self.rules, LayoutRules):
            if convention == "released":
                return self.rules
            return resolve_rules(self.job_model() or record.model, self.rules, convention)
        job = self.job_model()
        if job is None and record.model is None:  # a record may carry its own model: not the job's failure
            raise ModelRequired(
                f"no model: pass model= to the job (on the command line: --model or --model-dir), or give "
                f"every record a 'model'; name one of {', '.join(model_names())}"
            )
        model = require_model(job if job is not None else record.model, "model=")
        merged = {**(rules_dict(record.rules) or {}), **dict(self.rules or {})}
        return resolve_rules(model, merged or None, convention)

    @property
    def fractional(self) -> bool:
        """Whether this job's positions are float32 (its model's rules keep fractional time, Qwen3-Omni;
        with ``layer_sets``, the first set's). The Arrow column types are fixed per job, so only a
        job-level model (or full rules) decides it."""
        sets = self.job_sets
        if sets is not None:
            return sets.fractional
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

    @functools.cached_property
    def job_sets(self) -> JobSets | None:
        """The position sets every row carries (``layer_sets``), or ``None``; worked out once per job (every
        record's row and the column types read them)."""
        if self.layer_sets is None:
            return None
        rules = self.rules if isinstance(self.rules, LayoutRules) else self.rules or None
        return job_sets(self.layer_sets, self.job_model(), rules, self.convention or "released")

    @property
    def with_input_ids(self) -> bool:
        """Whether this job's rows carry ``input_ids``: ``input_ids`` when set, else whether the job has a
        tokenizer (a job-level fact, like :attr:`fractional`: the column types are fixed per job)."""
        if self.input_ids is not None:
            return self.input_ids
        if self.tokenizer is not None:
            return True
        try:
            return getattr(self.job_model(), "tokenizer", None) is not None
        except MRopeError:  # a bad model_dir fails each record with its own message
            return False

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

    def chat(self, record: Mapping[str, Any] | Record) -> tuple[ChatSegments, LayoutRules]:
        """The library segments of one record with its assistant-token masks
        (:class:`mrope.schema._messages.ChatSegments`), and its layout rules."""
        parsed = record if isinstance(record, Record) else parse_record(plain(record))
        if parsed.layer_sets is not None and self.layer_sets is None:
            raise RecordError(
                "the record asks for layer_sets, but this job's rows hold one set: run the job with "
                "layer_sets= (on the command line: mrope batch --layer-sets)"
            )
        rules = self.rules_for(parsed)
        reader = SegmentReader(
            rules,
            tokenizer=self.tokenizer_for(),
            media=self.media(),
            frame_size=self.frame_size,
            decode_check=self.decode_check,
            route=self.route or parsed.route,
            model=self._sizing_model(parsed),
        )
        try:
            if parsed.segments is not None:
                segments = reader.segments(parsed.segments)
                return ChatSegments(segments, [None] * len(segments)), rules
            template = self.template_for()
            if template is not None:
                chat = template_segments(
                    parsed.messages or [], reader, template, add_generation_prompt=self.add_generation_prompt
                )
            else:
                chat = turn_segments(
                    parsed.messages or [],
                    reader,
                    turn_format=self.turn_format,
                    generation_prompt=self.generation_prompt,
                )
        except TokenizerRequired as exc:
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

    def _sizing_model(self, record: Record) -> Any:
        """The model a record's media records name as the origin of its sizing values: the job's (or the
        record's) unless the job gives full rules, which then are the origin."""
        if isinstance(self.rules, LayoutRules):
            return None
        job = self.job_model()
        return job if job is not None else record.model

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
            return schema_text.load_tokenizer(self.tokenizer)
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
        p, labels, _ = self.checked_sets(record)
        return p, labels

    def checked_sets(
        self, record: Mapping[str, Any]
    ) -> tuple[Positions, np.ndarray | None, dict[str, Positions] | None]:
        """:meth:`checked_sample` and, with ``layer_sets``, every position set of the record in the job's
        order (the positions are the first; :func:`mrope._job_sets.record_sets`); else ``None``."""
        parsed = parse_record(plain(record))
        job = self.job_sets
        chat, rules = self.chat(parsed)
        sets = None
        if job is None:
            p = self.build(chat.segments, rules)
        else:
            tokenizer = self.tokenizer_for()
            sets = record_sets(job, parsed.layer_sets, chat.segments, rules, tokenizer, self.max_tokens)
            p = next(iter(sets.values()))
        labels = chat.labels(p) if self.labels else None
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
        return p, labels, sets

    def record(self, record: Mapping[str, Any], *, stop_on_job_error: bool = False) -> dict[str, Any]:
        """One record -> ``{positions int64 [3, T], delta, num_tokens, image_grid_thw [n, 3],
        video_grid_thw [m, 3], second_per_grid_ts [m], error}`` (plus ``input_ids [T]`` when :attr:`with_input_ids`, and
        ``generation_ids [3, g]`` when the job :attr:`generates_images`).

        A failure gives empty arrays, ``delta = num_tokens = 0``, the message in ``error`` (``""`` on
        success, so the column is a string column from the first row on) and its code in ``error_code``.
        A :class:`mrope._errors.JobError` (no tokenizer for text) is raised instead with
        ``stop_on_job_error`` (what :meth:`batch` and ``mrope batch`` do: every later record would fail
        alike).
        """
        try:
            p, labels, sets = self.checked_sets(record)
            return result_row(
                p,
                input_ids=self.with_input_ids,
                generation=self.generates_images,
                labels=labels,
                program=self.program,
                sets=sets,
                pattern=() if sets is None else self.job_sets.pattern,  # type: ignore[union-attr]
            )
        except JobError as exc:
            if stop_on_job_error:
                raise  # the whole job's failure: stop at once, naming the option
            return self._failed(exc)
        except Exception as exc:  # recorded per record, never raised through the job
            return self._failed(exc)

    def _failed(self, exc: BaseException) -> dict[str, Any]:
        return error_row(
            describe_error(exc),
            input_ids=self.with_input_ids,
            fractional=self.fractional,
            generation=self.generates_images,
            labels=self.labels,
            code=error_code(exc),
            program=self.program,
            sets=self.layer_sets is not None,
        )

    def batch(self, batch: Any) -> pa.Table:
        """A batch (dict of columns, pandas ``DataFrame`` or ``pyarrow.Table``) -> a ``pyarrow.Table`` of
        the ``keep`` columns and the :meth:`record` columns, one row per input row, types fixed by
        :func:`mrope._result_rows.arrow_schema` (so every batch of a Ray job has the same schema). A :class:`JobError`
        stops it (and the job). With ``pack``: the packed rows of the batch (:meth:`packed`)."""
        if self.pack is not None:
            return self.packed(batch)
        records = batch_records(batch)
        rows = [self.record(r, stop_on_job_error=True) for r in records]
        return rows_to_table(
            rows,
            records,
            keep=self.keep,
            input_ids=self.with_input_ids,
            fractional=self.fractional,
            generation=self.generates_images,
            labels=self.labels,
            program=self.program,
            sets_dtype=None if self.layer_sets is None else self.job_sets.dtype,  # type: ignore[union-attr]
        )

    def packed(self, batch: Any) -> pa.Table:
        """A batch (as :meth:`batch` takes, or a list of records) -> a ``pyarrow.Table`` of packed rows
        (:func:`mrope.packing._table.packed_table`): the batch's samples packed by :func:`mrope.pack` into rows of at most
        ``pack`` tokens, then one error row per record that failed (or is longer than ``pack``). The
        ``samples`` column holds indices into the batch. A :class:`JobError` stops it (and the job)."""
        if self.pack is None:
            raise RecordError("packed() needs pack= (the row length in tokens)")
        if self.program:
            raise RecordError(
                "program=True gives each record's row its position program; packed rows (pack=) hold "
                "several records and carry none: run the job without pack= for the program column"
            )
        records, job = batch_records(batch), self.job_sets
        samples: list[PackItem] = []
        for record in records:
            try:
                samples.append(self.checked_sets(record))
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
            sets_dtype=None if job is None else job.dtype,
            pattern=() if job is None else job.pattern,
        )

    def with_options(self, **changes: Any) -> Preprocessor:
        """A copy with some options changed."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"unknown Preprocessor options {sorted(unknown)}")
        return replace(self, **changes)


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
    "Preprocessor",
    "QWEN_TURN",
    "RESULT_COLUMNS",
    "RecordError",
    "pack_batch",
    "pack_efficiency",
    "plain",
    "process_batch",
    "process_record",
    "record_positions",
]
