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

This package exports the wire schema: the request, record, segment and state models, the functions that
parse and convert them, what a face may read (:class:`MediaAccess`) and the error. The faces' own
helpers (field types, the segment reader, tokenizers, chat templates, state checks) stay in the modules
that define them.

The modules, one job each: :mod:`~mrope.schema._errors` (the error, pydantic's errors in one line),
:mod:`~mrope.schema._fields` (bounded field types, model names, rule overrides),
:mod:`~mrope.schema._aliases` (the media keys users copy from model cards), :mod:`~mrope.schema._forms`
(what every image and video form shares), :mod:`~mrope.schema._image` and :mod:`~mrope.schema._video` (a
model per form), :mod:`~mrope.schema._request` (text and audio segments, the segment union, the upload
fields), :mod:`~mrope.schema._records` (batch records and chat messages), :mod:`~mrope.schema._formats` (the
dataset formats read as messages: TRL, LLaVA / ShareGPT, OpenAI, items without type),
:mod:`~mrope.schema._parse` (JSON
-> models), :mod:`~mrope.schema._media` (what a face may read), :mod:`~mrope.schema._text` (the tokenizer
and text), :mod:`~mrope.schema._convert` (models -> library segments), :mod:`~mrope.schema._messages` (chat
messages -> library segments and the assistant-token mask), :mod:`~mrope.schema._state` (a conversation's
state, sent back to continue it), :mod:`~mrope.schema._sets` (a request's ``layer_sets``).
"""

from __future__ import annotations

from mrope import _extras

_extras.require("mrope.schema", "pipeline", "pydantic")

from ._convert import to_segments
from ._errors import RequestError
from ._fields import RulesOverrides
from ._forms import KeepMask, MediaUrl
from ._image import ImageGrid, ImagePath, ImageSegment, ImageSize, TilingOptions
from ._media import MEDIA_NONE, MediaAccess
from ._messages import message_segments
from ._parse import parse_record, parse_request, parse_segments
from ._records import Message, MessageText, PositionsRequest, Record
from ._request import AudioSegment, TextSegment
from ._state import ConversationStateBody
from ._video import VideoAudio, VideoFrames, VideoGrid, VideoPath, VideoSegment

__all__ = [
    "MEDIA_NONE",
    "AudioSegment",
    "ConversationStateBody",
    "ImageGrid",
    "ImagePath",
    "ImageSegment",
    "ImageSize",
    "KeepMask",
    "MediaAccess",
    "MediaUrl",
    "Message",
    "MessageText",
    "PositionsRequest",
    "Record",
    "RequestError",
    "RulesOverrides",
    "TextSegment",
    "TilingOptions",
    "VideoAudio",
    "VideoFrames",
    "VideoGrid",
    "VideoPath",
    "VideoSegment",
    "message_segments",
    "parse_record",
    "parse_request",
    "parse_segments",
    "to_segments",
]
