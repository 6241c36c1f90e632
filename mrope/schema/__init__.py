"""The JSON form of a request: one pydantic definition of a segment, a layout and a batch record.

Every face reads requests through these models: the HTTP service (``POST /v1/positions``, the upload
layout), ``mrope positions --spec``, ``mrope batch`` and :mod:`mrope.pipeline`. So the same JSON is
accepted or refused the same way everywhere, with the same message.

The rules, for every face:

- Unknown fields are refused (a typo is an error, never a silently ignored option). ``null`` means
  absent, as in ``rules`` overrides (Arrow readers fill every struct field that any row has with null).
- Types are strict: ``"3"`` or ``3.0`` is not an int and ``1`` is not a boolean. Numbers are bounded to
  what the library can hold (int64 token ids, finite floats, physically plausible rates and times).
- Media given by ``path`` (a local file, an ``s3://`` / ``gs://`` / ``https://`` / ``file://`` URL or a
  ``data:`` URI) are read only by a face that says so with a :class:`MediaAccess` (the command line and
  the pipeline, by their options); without one such a segment is refused. The service never reads local
  files, and reads URLs only from the hosts of its allowlist.

:func:`to_segments` turns validated segments into :class:`mrope.Text` / :class:`mrope.Image` /
:class:`mrope.Video`; coordinates are the builder's business, not this package's.

The modules, one job each: :mod:`~mrope.schema.errors` (the error, pydantic's errors in one line),
:mod:`~mrope.schema.fields` (bounded field types, model names, rule overrides), :mod:`~mrope.schema.request`
(segments, the layout, the upload fields), :mod:`~mrope.schema.records` (batch records and chat messages),
:mod:`~mrope.schema.parse` (JSON -> models), :mod:`~mrope.schema.media` (what a face may read),
:mod:`~mrope.schema.text` (the tokenizer and text), :mod:`~mrope.schema.convert` (models -> library
segments), :mod:`~mrope.schema.messages` (chat messages -> library segments and the assistant-token mask),
:mod:`~mrope.schema.state` (a conversation's state, sent back to continue it).
"""

from __future__ import annotations

from mrope.media.source import is_url  # the media readers' test, named here as before

from .convert import (
    SegmentReader,
    audio_from,
    image_from,
    keep_mask,
    sizing,
    text_from,
    to_segment,
    to_segments,
    video_from,
)
from .errors import RequestError, describe_validation_errors
from .fields import (
    GRID_DIM_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_FPS,
    MAX_FRAME_TIME,
    MAX_PATH_CHARS,
    MAX_SECONDS_PER_PATCH,
    MAX_TOKENS_PER_SECOND,
    MIN_FPS,
    AudioSeconds,
    Count,
    FiniteFloat,
    Fps,
    FrameTime,
    Grid,
    GridDim,
    Int64,
    MediaPath,
    ModelName,
    RulesOverrides,
    SecondsPerPatch,
    StrictModel,
    canonical_model,
    model_names,
    require_model,
    rules_dict,
)
from .media import MEDIA_NONE, MediaAccess
from .messages import ChatSegments, message_segments, template_segments, turn_segments
from .parse import parse_record, parse_request, parse_segments
from .records import (
    Message,
    MessageImage,
    MessageItem,
    MessageText,
    MessageVideo,
    PositionsRequest,
    Record,
    RecordId,
)
from .request import (
    AudioSegment,
    FileItem,
    ImageSegment,
    KeepMask,
    LayoutItem,
    Segment_,
    TextSegment,
    TilingOptions,
    UploadFields,
    VideoAudio,
    VideoSegment,
)
from .state import MAX_STATE_NUMBER, ConversationStateBody, check_turn_start, request_state
from .text import TokenizerRequired, load_tokenizer, tokenize

__all__ = [
    "ChatSegments",
    "AudioSeconds",
    "AudioSegment",
    "ConversationStateBody",
    "Count",
    "FileItem",
    "FiniteFloat",
    "Fps",
    "FrameTime",
    "GRID_DIM_MAX",
    "Grid",
    "GridDim",
    "INT64_MAX",
    "INT64_MIN",
    "ImageSegment",
    "Int64",
    "KeepMask",
    "LayoutItem",
    "MAX_FPS",
    "MAX_FRAME_TIME",
    "MAX_PATH_CHARS",
    "MAX_SECONDS_PER_PATCH",
    "MAX_STATE_NUMBER",
    "MAX_TOKENS_PER_SECOND",
    "MEDIA_NONE",
    "MIN_FPS",
    "MediaAccess",
    "MediaPath",
    "Message",
    "MessageImage",
    "MessageItem",
    "MessageText",
    "MessageVideo",
    "ModelName",
    "PositionsRequest",
    "Record",
    "RecordId",
    "RequestError",
    "RulesOverrides",
    "SecondsPerPatch",
    "SegmentReader",
    "Segment_",
    "StrictModel",
    "TextSegment",
    "TilingOptions",
    "TokenizerRequired",
    "UploadFields",
    "VideoAudio",
    "VideoSegment",
    "audio_from",
    "canonical_model",
    "describe_validation_errors",
    "image_from",
    "is_url",
    "keep_mask",
    "load_tokenizer",
    "message_segments",
    "model_names",
    "parse_record",
    "parse_request",
    "parse_segments",
    "check_turn_start",
    "request_state",
    "require_model",
    "rules_dict",
    "text_from",
    "to_segment",
    "to_segments",
    "sizing",
    "template_segments",
    "tokenize",
    "turn_segments",
    "video_from",
]
