"""Records -> positions, for preprocessing at scale (a plain loop, Hugging Face ``datasets``, Ray Data).

A record is a dict with an ``id`` and either

- ``segments``: the JSON segments of ``POST /v1/positions`` (``{"type": "text", "tokens" | "ids" |
  "text": ...}``, ``{"type": "image", "grid" | "height"+"width", ...}``, ``{"type": "video", "grid", ...}``),
  plus media files: ``{"type": "image", "path": "cat.jpg", "tiling": true, "crop": [top, left, h, w]}``
  and ``{"type": "video", "path": "clip.mp4", "fps": 2.0 | "nframes": 16}``; or
- ``messages``: chat-style turns, ``[{"role": "user", "content": [{"type": "text", "text": "..."},
  {"type": "image", "image": "cat.jpg"}, {"type": "video", "video": "clip.mp4"}]}]``. Text needs a
  tokenizer for its token count, or a ``"tokens": n`` count in the item.

Optional ``model`` and ``rules`` keys in a record are used when the job does not set them (the job's
``model`` wins; the job's ``rules`` overrides are applied over the record's). Relative media paths are
resolved against ``base_dir``. Keys that are ``None`` count as absent, because Arrow fills every struct
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

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope.builder import Positions, build_positions, count_tokens
from mrope.errors import MRopeError
from mrope.rules import LayoutRules, resolve_rules
from mrope.segments import Image, Segment, Text, Video
from mrope.tokenizer import encode_text as _encode
from mrope.vision import image_grid, load_image, load_video

if TYPE_CHECKING:
    import pyarrow as pa

QWEN_TURN = ("<|im_start|>{role}\n", "<|im_end|>\n")
"""The Qwen chat template's turn wrapper, for ``turn_format``; the generation prompt is
``"<|im_start|>assistant\\n"``."""

RESULT_COLUMNS = (
    "positions",
    "delta",
    "num_tokens",
    "image_grid_thw",
    "video_grid_thw",
    "second_per_grid_ts",
    "error",
)
"""The columns :func:`process_record` returns (plus ``input_ids`` when asked for)."""


DEFAULT_MAX_TOKENS = 1 << 24
"""Most tokens one record may make by default (16,777,216: 400 MB of int64 positions)."""


class RecordError(MRopeError):
    """A record that does not have the documented shape (missing keys, unknown fields, wrong types)."""


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


@functools.lru_cache(maxsize=8)
def _tokenizer_from_file(path: str) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise RecordError(
            f"tokenizer {path!r} is a path, which needs the 'tokenizers' package (pip install tokenizers)"
        ) from None
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises a bare Exception
        raise RecordError(f"cannot load tokenizer {path!r} as a tokenizer.json: {exc}") from None


def load_tokenizer(tokenizer: Any) -> Any:
    """A ``tokenizer.json`` path -> ``tokenizers.Tokenizer`` (loaded once per process); anything else
    (a callable ``str -> list[int]``, a tokenizer object, ``None``) is returned as it is."""
    if isinstance(tokenizer, (str, os.PathLike)):
        return _tokenizer_from_file(os.fspath(tokenizer))
    return tokenizer


def encode_text(tokenizer: Any, text: str, where: str) -> list[int]:
    """Token ids of ``text`` (no special tokens added) with a ``tokenizers.Tokenizer``, a transformers
    tokenizer or a callable ``str -> list[int]``."""
    if tokenizer is None:
        raise RecordError(
            f"{where}: text needs a tokenizer to count its tokens: pass tokenizer= (a tokenizer.json path, "
            "a tokenizers.Tokenizer or a callable str -> list[int]), or give a 'tokens' count"
        )
    try:
        return _encode(tokenizer, text)
    except MRopeError as exc:
        raise RecordError(f"{where}: {exc}") from None


# ----------------------------------------------------------------------------------- JSON segments

_TEXT_KEYS = {"type", "tokens", "ids", "text"}
_IMAGE_KEYS = {
    "grid": {"type", "grid", "tiles", "thumbnail", "tile_order", "origin", "wrap"},
    "size": {"type", "height", "width", "tiles", "thumbnail", "tile_order", "origin", "wrap"},
    "path": {"type", "path", "tiling", "crop", "wrap"},
}
_VIDEO_KEYS = {
    "grid": {"type", "grid", "fps", "second_per_grid", "frame_times", "wrap"},
    "path": {"type", "path", "fps", "nframes", "min_frames", "max_frames", "wrap"},
}


def _given(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if v is not None}


def _check_keys(item: Mapping[str, Any], allowed: set[str], where: str, form: str) -> None:
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise RecordError(
            f"{where}: unknown field(s) {unknown} for {form}; expected some of {sorted(allowed - {'type'})}"
        )


def _int(value: Any, name: str, where: str, lo: int = 0) -> int:
    """An int field; a whole float (``12.0``) counts, as Arrow turns int columns with nulls into floats."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise RecordError(f"{where}: {name} must be an int >= {lo}; got {value!r}")
    return value


def _bool(value: Any, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"{where}: {name} must be true or false; got {value!r}")
    return value


def _number(value: Any, name: str, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise RecordError(f"{where}: {name} must be a finite number > 0; got {value!r}")
    return float(value)


def _resolve_path(value: Any, base_dir: str | os.PathLike[str] | None, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordError(f"{where}: a media path must be a non-empty string; got {value!r}")
    if "://" in value:
        raise RecordError(f"{where}: {value!r} is a URL; mrope reads local files (download it first)")
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return str(path)


def _text(item: dict[str, Any], where: str, tokenizer: Any) -> Text:
    _check_keys(item, _TEXT_KEYS, where, "a text segment")
    given = [k for k in ("tokens", "ids", "text") if k in item]
    if len(given) != 1:
        raise RecordError(
            f"{where}: a text segment takes exactly one of tokens, ids, text; got {given or 'none'}"
        )
    if "tokens" in item:
        return Text(_int(item["tokens"], "tokens", where))
    if "ids" in item:
        ids = item["ids"]
        if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise RecordError(f"{where}: ids must be a list of int token ids; got {ids!r}")
        return Text(ids)
    if not isinstance(item["text"], str):
        raise RecordError(f"{where}: text must be a string; got {item['text']!r}")
    return Text(encode_text(tokenizer, item["text"], where))


def _image(item: dict[str, Any], where: str, rules: LayoutRules, base_dir: Any) -> Image:
    form = "path" if "path" in item else "grid" if "grid" in item else "size"
    _check_keys(item, _IMAGE_KEYS[form], where, f"an image given by {form}")
    wrap = _bool(item.get("wrap", True), "wrap", where)
    if form == "path":
        tiling = item.get("tiling")
        if tiling is not None and not isinstance(tiling, (bool, Mapping)):
            raise RecordError(
                f"{where}: tiling must be true, false or an object of TilePlan fields; got {tiling!r}"
            )
        crop = item.get("crop")
        if crop is not None and not isinstance(crop, list):
            raise RecordError(f"{where}: crop must be [top, left, height, width] in pixels; got {crop!r}")
        path = _resolve_path(item["path"], base_dir, where)
        return load_image(path, rules=rules, tiling=tiling, crop=crop, wrap=wrap)
    if form == "grid":
        grid = item["grid"]
    else:
        if "height" not in item or "width" not in item:
            raise RecordError(f"{where}: an image needs a path, a grid [t, h, w], or both height and width")
        grid = image_grid(
            _int(item["height"], "height", where, 1), _int(item["width"], "width", where, 1), rules=rules
        )
    order = item.get("tile_order")
    if order is not None and (
        not isinstance(order, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in order)
    ):
        raise RecordError(f"{where}: tile_order must be a list of int tile indices; got {order!r}")
    return Image(
        grid=grid,
        tiles=item.get("tiles"),
        thumbnail=_bool(item.get("thumbnail", False), "thumbnail", where),
        tile_order=order,
        origin=item.get("origin", (0, 0)),
        wrap=wrap,
    )


def _video(item: dict[str, Any], where: str, rules: LayoutRules, base_dir: Any) -> Video:
    form = "path" if "path" in item else "grid"
    _check_keys(item, _VIDEO_KEYS[form], where, f"a video given by {form}")
    wrap = _bool(item.get("wrap", True), "wrap", where)
    fps = _number(item["fps"], "fps", where) if "fps" in item else None
    if form == "path":
        counts = {k: _int(item[k], k, where, 1) for k in ("nframes", "min_frames", "max_frames") if k in item}
        path = _resolve_path(item["path"], base_dir, where)
        return load_video(path, rules=rules, fps=fps, wrap=wrap, **counts)
    if "grid" not in item:
        raise RecordError(f"{where}: a video needs a path or a grid [t, h, w]")
    spg = item.get("second_per_grid")
    return Video(
        grid=item["grid"],
        fps=fps,
        second_per_grid=None if spg is None else _number(spg, "second_per_grid", where),
        frame_times=item.get("frame_times"),
        wrap=wrap,
    )


def segment_from_json(
    item: Any, where: str, rules: LayoutRules, *, tokenizer: Any = None, base_dir: Any = None
) -> Segment:
    """One JSON segment -> :class:`Text`, :class:`Image` or :class:`Video` (media files are read here)."""
    if not isinstance(item, Mapping):
        raise RecordError(f"{where} must be an object with a 'type'; got {type(item).__name__}")
    item = _given(item)
    kind = item.get("type")
    if kind == "text":
        return _text(item, where, tokenizer)
    if kind == "image":
        return _image(item, where, rules, base_dir)
    if kind == "video":
        return _video(item, where, rules, base_dir)
    raise RecordError(f"{where}: type must be 'text', 'image' or 'video'; got {kind!r}")


def segments_from_json(
    items: Any, rules: LayoutRules, *, tokenizer: Any = None, base_dir: Any = None
) -> list[Segment]:
    """The JSON segments of a record (or of a ``POST /v1/positions`` body) -> library segments."""
    if not isinstance(items, list):
        raise RecordError(f"segments must be a list of segment objects; got {type(items).__name__}")
    return [
        segment_from_json(item, f"segment {i}", rules, tokenizer=tokenizer, base_dir=base_dir)
        for i, item in enumerate(items)
    ]


# ----------------------------------------------------------------------------------------- messages


def segments_from_messages(
    messages: Any,
    rules: LayoutRules,
    *,
    tokenizer: Any = None,
    base_dir: Any = None,
    turn_format: tuple[str, str] | None = None,
    generation_prompt: str | None = None,
) -> list[Segment]:
    """Chat-style messages -> library segments, in order.

    Text items are ``{"type": "text", "text": "..."}`` (tokenized) or carry ``"tokens": n``; a message's
    ``content`` may also be a plain string. Image and video items name their file with ``"image"`` /
    ``"video"`` (or ``"path"``) and take the JSON segment options (``tiling``, ``crop``, ``fps``,
    ``nframes``, ``grid``, ...). ``turn_format = (prefix, suffix)`` wraps each message's content
    (``{role}`` is filled in, e.g. :data:`QWEN_TURN`) and ``generation_prompt`` is text appended at the
    end; both need a tokenizer. Adjacent strings are tokenized together, as a chat template would render
    them.
    """
    if not isinstance(messages, list):
        raise RecordError(
            f"messages must be a list of {{role, content}} objects; got {type(messages).__name__}"
        )
    out: list[Segment] = []
    pending: list[str] = []  # strings rendered since the last vision item or count
    origin: list[str] = []  # where the first of them came from, for messages

    def add_text(text: str, where: str) -> None:
        if not pending:
            origin[:] = [where]
        pending.append(text)

    def flush() -> None:
        if pending:
            out.append(Text(encode_text(tokenizer, "".join(pending), origin[0])))
            pending.clear()

    for m, message in enumerate(messages):
        where = f"message {m}"
        if not isinstance(message, Mapping):
            raise RecordError(
                f"{where} must be an object with role and content; got {type(message).__name__}"
            )
        message = _given(message)
        role, content = message.get("role", ""), message.get("content", [])
        if not isinstance(role, str):
            raise RecordError(f"{where}: role must be a string; got {role!r}")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise RecordError(
                f"{where}: content must be a string or a list of items; got {type(content).__name__}"
            )
        if turn_format is not None:
            add_text(turn_format[0].format(role=role), f"{where} (its turn prefix)")
        for c, raw in enumerate(content):
            at = f"{where} item {c}"
            if not isinstance(raw, Mapping):
                raise RecordError(f"{at} must be an object with a 'type'; got {type(raw).__name__}")
            item = _given(raw)
            kind = item.get("type")
            if kind == "text":
                _check_keys(item, {"type", "text", "tokens"}, at, "a text item")
                if "tokens" in item:
                    flush()
                    out.append(Text(_int(item["tokens"], "tokens", at)))
                elif isinstance(item.get("text"), str):
                    add_text(item["text"], at)
                else:
                    raise RecordError(f"{at}: a text item needs a 'text' string or a 'tokens' count")
                continue
            if kind in ("image", "video"):
                if kind in item:
                    if "path" in item:
                        raise RecordError(f"{at}: give the file as {kind!r} or 'path', not both")
                    item["path"] = item.pop(kind)
                flush()
                out.append(segment_from_json(item, at, rules, tokenizer=tokenizer, base_dir=base_dir))
                continue
            raise RecordError(f"{at}: type must be 'text', 'image' or 'video'; got {kind!r}")
        if turn_format is not None:
            add_text(turn_format[1].format(role=role), f"{where} (its turn suffix)")
    if generation_prompt:
        add_text(generation_prompt, "the generation prompt")
    flush()
    return out


# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class Preprocessor:
    """The options of a preprocessing job, and its per-record and per-batch functions.

    Attributes:
        model: the preset; ``None`` takes each record's ``model``.
        rules: a :class:`LayoutRules`, or a dict of overrides applied over each record's ``rules``.
        tokenizer: a ``tokenizer.json`` path (loaded once per worker process), a ``tokenizers.Tokenizer``,
            a transformers tokenizer or a callable ``str -> list[int]``; needed for text given as a string
            and for Qwen3-VL / GLM-4.1V video timestamps.
        base_dir: folder that relative media paths are resolved against (default: the working directory).
        turn_format, generation_prompt: chat wrapping of ``messages`` (see :func:`segments_from_messages`).
        input_ids: also return the ``input_ids`` column (the token ids the model would see).
        keep: input columns that :meth:`batch` copies to its output (when present).
        max_tokens: a record that would make more tokens fails (counted before any array is allocated,
            so a grid typo cannot exhaust a worker's memory); ``None``: no limit.
    """

    model: str | None = None
    rules: LayoutRules | Mapping[str, Any] | None = None
    tokenizer: Any = None
    base_dir: str | os.PathLike[str] | None = None
    turn_format: tuple[str, str] | None = None
    generation_prompt: str | None = None
    input_ids: bool = False
    keep: tuple[str, ...] = ("id",)
    max_tokens: int | None = DEFAULT_MAX_TOKENS

    def rules_for(self, record: Mapping[str, Any]) -> LayoutRules:
        """The layout rules of one record: the job's model and overrides over the record's."""
        if isinstance(self.rules, LayoutRules):
            return self.rules
        model = self.model if self.model is not None else record.get("model")
        if model is None:
            raise RecordError("no model: pass model= to the job, or give the record a 'model'")
        if not isinstance(model, str):
            raise RecordError(f"model must be a preset name; got {model!r}")
        own = record.get("rules")
        if own is not None and not isinstance(own, Mapping):
            raise RecordError(f"a record's rules must be an object of LayoutRules overrides; got {own!r}")
        merged = {**_given(own or {}), **dict(self.rules or {})}
        return resolve_rules(model, merged or None)

    def segments(self, record: Mapping[str, Any]) -> tuple[list[Segment], LayoutRules]:
        """The library segments of one record (media files are read here) and its layout rules."""
        if not isinstance(record, Mapping):
            raise RecordError(f"a record must be an object; got {type(record).__name__}")
        record = plain(record)
        has_segments, has_messages = record.get("segments") is not None, record.get("messages") is not None
        if has_segments == has_messages:
            raise RecordError("a record needs exactly one of 'segments' and 'messages'")
        rules = self.rules_for(record)
        tokenizer = load_tokenizer(self.tokenizer)
        if has_segments:
            return segments_from_json(
                record["segments"], rules, tokenizer=tokenizer, base_dir=self.base_dir
            ), rules
        segments = segments_from_messages(
            record["messages"],
            rules,
            tokenizer=tokenizer,
            base_dir=self.base_dir,
            turn_format=self.turn_format,
            generation_prompt=self.generation_prompt,
        )
        return segments, rules

    def build(self, segments: Sequence[Segment], rules: LayoutRules) -> Positions:
        """Positions of ``segments``, after checking their token count against ``max_tokens``."""
        tokenizer = load_tokenizer(self.tokenizer)
        if self.max_tokens is not None:
            n = count_tokens(segments, rules=rules, tokenizer=tokenizer)
            if n > self.max_tokens:
                raise RecordError(
                    f"the sequence makes {n:,} tokens, over max_tokens={self.max_tokens:,} (a grid typo?); "
                    "raise max_tokens (on the command line: --max-tokens) to build it"
                )
        return build_positions(segments, rules=rules, tokenizer=tokenizer)

    def positions(self, record: Mapping[str, Any]) -> Positions:
        """The positions of one record (raises :class:`mrope.MRopeError` on bad input)."""
        return self.build(*self.segments(record))

    def record(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """One record -> ``{positions int64 [3, T], delta, num_tokens, image_grid_thw [n, 3],
        video_grid_thw [m, 3], second_per_grid_ts [m], error}`` (plus ``input_ids [T]`` when asked for).

        A failure gives empty arrays, ``delta = num_tokens = 0`` and the message in ``error`` (``""`` on
        success, so the column is a string column from the first row on).
        """
        try:
            return result_row(self.positions(record), input_ids=self.input_ids)
        except Exception as exc:  # recorded per record, never raised through the job
            return error_row(describe_error(exc), input_ids=self.input_ids)

    def batch(self, batch: Any) -> pa.Table:
        """A batch (dict of columns, pandas ``DataFrame`` or ``pyarrow.Table``) -> a ``pyarrow.Table`` of
        the ``keep`` columns and the :meth:`record` columns, one row per input row, types fixed by
        :func:`arrow_schema` (so every batch of a Ray job has the same schema)."""
        records = batch_records(batch)
        rows = [self.record(r) for r in records]
        return rows_to_table(rows, records, keep=self.keep, input_ids=self.input_ids)

    def with_options(self, **changes: Any) -> Preprocessor:
        """A copy with some options changed."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"unknown Preprocessor options {sorted(unknown)}")
        return replace(self, **changes)


def describe_error(exc: BaseException) -> str:
    """One line for a failed record: the library's message, or the exception type and message."""
    text = " ".join(str(exc).split())
    if isinstance(exc, MRopeError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def result_row(p: Positions, *, input_ids: bool = False) -> dict[str, Any]:
    """The columns of a successful record."""
    row: dict[str, Any] = {
        "positions": p.ids,
        "delta": int(p.delta),
        "num_tokens": int(p.num_tokens),
        "image_grid_thw": p.image_grid_thw,
        "video_grid_thw": p.video_grid_thw,
        "second_per_grid_ts": p.second_per_grid_ts,
        "error": "",
    }
    if input_ids:
        row["input_ids"] = p.input_ids
    return row


def error_row(message: str, *, input_ids: bool = False) -> dict[str, Any]:
    """The columns of a failed record: empty arrays of the right shapes and dtypes, and the message."""
    row: dict[str, Any] = {
        "positions": np.zeros((3, 0), dtype=np.int64),
        "delta": 0,
        "num_tokens": 0,
        "image_grid_thw": np.zeros((0, 3), dtype=np.int64),
        "video_grid_thw": np.zeros((0, 3), dtype=np.int64),
        "second_per_grid_ts": np.zeros(0, dtype=np.float64),
        "error": message or "failed",
    }
    if input_ids:
        row["input_ids"] = np.zeros(0, dtype=np.int64)
    return row


# -------------------------------------------------------------------------------------------- Arrow


def arrow_schema(*, input_ids: bool = False) -> pa.Schema:
    """The Arrow types of the result columns."""
    import pyarrow as pa

    nested = pa.list_(pa.list_(pa.int64()))
    cols = [
        ("positions", nested),
        ("delta", pa.int64()),
        ("num_tokens", pa.int64()),
        ("image_grid_thw", nested),
        ("video_grid_thw", nested),
        ("second_per_grid_ts", pa.list_(pa.float64())),
        ("error", pa.string()),
    ]
    if input_ids:
        cols.append(("input_ids", pa.list_(pa.int64())))
    return pa.schema(cols)


def _list_column(arrays: Sequence[np.ndarray], value_type: pa.DataType) -> pa.Array:
    """``list<value>`` from 1-D arrays, without Python lists."""
    import pyarrow as pa

    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    values = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def _nested_column(arrays: Sequence[np.ndarray]) -> pa.Array:
    """``list<list<int64>>`` from 2-D int arrays (rows become inner lists)."""
    import pyarrow as pa

    rows = [row for a in arrays for row in a]
    inner = _list_column(rows, pa.int64())
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([a.shape[0] for a in arrays], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def _missing(value: Any) -> bool:
    return (isinstance(value, float) and math.isnan(value)) or type(value).__name__ in ("NAType", "NaTType")


def batch_records(batch: Any) -> list[dict[str, Any]]:
    """The rows of a batch given as a dict of columns, a pandas ``DataFrame`` or a ``pyarrow.Table``."""
    if hasattr(batch, "to_pylist"):  # pyarrow.Table
        return list(batch.to_pylist())
    if hasattr(batch, "to_dict") and hasattr(batch, "columns"):  # pandas.DataFrame
        # pandas fills a column's missing cells with NaN (or pd.NA): they mean "absent", like None
        return [{k: None if _missing(v) else v for k, v in r.items()} for r in batch.to_dict("records")]
    if isinstance(batch, Mapping):
        columns = {k: list(v) for k, v in batch.items()}
        sizes = {len(v) for v in columns.values()}
        if len(sizes) > 1:
            raise RecordError(f"batch columns have different lengths {sorted(sizes)}")
        n = sizes.pop() if sizes else 0
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    raise RecordError(
        f"a batch must be a dict of columns, a pandas DataFrame or a pyarrow Table; got {type(batch).__name__}"
    )


def rows_to_table(
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]] = (),
    *,
    keep: Sequence[str] = ("id",),
    input_ids: bool = False,
) -> pa.Table:
    """Result rows (from :func:`process_record`) as a ``pyarrow.Table`` with :func:`arrow_schema` types,
    after the ``keep`` columns copied from ``records`` (those every record has)."""
    import pyarrow as pa

    schema = arrow_schema(input_ids=input_ids)
    columns: dict[str, pa.Array] = {}
    for name in keep:
        if records and all(name in r for r in records):
            columns[name] = pa.array([plain(r[name]) for r in records])
    for field in schema:
        values = [row[field.name] for row in rows]
        if field.name in ("positions", "image_grid_thw", "video_grid_thw"):
            columns[field.name] = _nested_column([np.asarray(v, dtype=np.int64) for v in values])
        elif field.name in ("second_per_grid_ts", "input_ids"):
            columns[field.name] = _list_column([np.asarray(v) for v in values], field.type.value_type)
        else:
            columns[field.name] = pa.array(values, type=field.type)
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


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "QWEN_TURN",
    "RESULT_COLUMNS",
    "Preprocessor",
    "RecordError",
    "arrow_schema",
    "batch_records",
    "describe_error",
    "encode_text",
    "error_row",
    "load_tokenizer",
    "plain",
    "process_batch",
    "process_record",
    "record_positions",
    "result_row",
    "rows_to_table",
    "segment_from_json",
    "segments_from_json",
    "segments_from_messages",
]
