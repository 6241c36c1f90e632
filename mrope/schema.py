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
:class:`mrope.Video`; coordinates are the builder's business, not this module's.
"""

from __future__ import annotations

import functools
import os
import re
import string
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from mrope.errors import MRopeError
from mrope.rules import PRESET_NAMES, LayoutRules
from mrope.segments import Audio, Image, Segment, Text, Video


class RequestError(MRopeError):
    """A request, record or segment that does not have the documented JSON shape."""


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
GRID_DIM_MAX = 2**31 - 1

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
GridDim = Annotated[int, Field(ge=1, le=GRID_DIM_MAX)]
Grid = Annotated[list[GridDim], Field(min_length=3, max_length=3, description="encoder patch grid [t, h, w]")]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# Time values are bounded to physically plausible ranges: with the token and segment caps they keep
# every position far inside int64 (the library computes t offsets in int64).
MAX_FPS = 1000.0
MIN_FPS = 1e-3
MAX_SECONDS_PER_PATCH = 3600.0
MAX_FRAME_TIME = 1e7
MAX_AUDIO_SECONDS = 48 * 3600.0  # the longest audio clip mrope.vision.load_audio accepts
MAX_TOKENS_PER_SECOND = 1000.0
MAX_PATH_CHARS = 1 << 20  # a data: URI of a small image fits
Fps = Annotated[float, Field(ge=MIN_FPS, le=MAX_FPS, allow_inf_nan=False, description="frames per second")]
SecondsPerPatch = Annotated[float, Field(gt=0, le=MAX_SECONDS_PER_PATCH, allow_inf_nan=False)]
FrameTime = Annotated[float, Field(ge=0, le=MAX_FRAME_TIME, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=GRID_DIM_MAX)]
MediaPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="a media file: a local path, an s3:// gs:// https:// file:// URL or a data: URI "
        "(read only by faces that allow it; the service reads URLs of allowlisted hosts only)",
    ),
]
_RULE_TYPES: dict[str, Any] = {
    "fps": Fps,
    "tokens_per_second": Annotated[float, Field(gt=0, le=MAX_TOKENS_PER_SECOND, allow_inf_nan=False)],
}


# ------------------------------------------------------------------------------------------- models


def model_names() -> tuple[str, ...]:
    """The canonical model names a request may give (the registry's families when it exists)."""
    try:
        from mrope import models as registry  # type: ignore[attr-defined]

        return tuple(f.name for f in registry.families())
    except (ImportError, AttributeError):
        return tuple(PRESET_NAMES)


@functools.lru_cache(maxsize=256)  # a registry lookup per request otherwise; unknown names are not kept
def canonical_model(name: str) -> str:
    """``name`` (a model name, a Hugging Face ``model_type`` or a repo id) -> the canonical name.

    Raises:
        ValueError: an unknown name; the message lists the known ones (pydantic reports it as a field
            error, the faces as :class:`RequestError`).
    """
    try:
        from mrope import models as registry  # type: ignore[attr-defined]

        get_family = registry.get_family
    except (ImportError, AttributeError):
        get_family = None
    if get_family is not None:
        try:
            return str(get_family(name).name)
        except MRopeError as exc:
            raise ValueError(str(exc)) from None
    if name in PRESET_NAMES:
        return name
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(PRESET_NAMES)}")


ModelName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        description="the model: " + ", ".join(PRESET_NAMES) + " (or a Hugging Face model_type / repo id)",
        examples=list(PRESET_NAMES),
    ),
    AfterValidator(canonical_model),
]
"""A model name, validated against the library's list (aliases resolved to the canonical name)."""


def require_model(model: Any, where: str = "", missing: str = "no model given") -> str:
    """A face's model, required: ``None`` is an error listing the names (there is no default model).

    Returns the canonical name (aliases resolved), or a :class:`mrope.models.ModelFamily` as given (what
    :func:`mrope.from_pretrained` returns); ``where`` prefixes other errors, ``missing`` is the
    start of the message when no model came.
    """
    if model is None or model == "":
        raise RequestError(f"{missing}; name one of {', '.join(model_names())}")
    from mrope.models import ModelFamily

    if isinstance(model, ModelFamily):  # a registered family or mrope.from_pretrained(<checkpoint>)
        return model  # type: ignore[return-value]
    prefix = f"{where}: " if where else ""
    if not isinstance(model, str):
        raise RequestError(f"{prefix}model must be a model name string; got {model!r}")
    try:
        return canonical_model(model)
    except ValueError as exc:
        raise RequestError(f"{prefix}{exc}") from None


# ------------------------------------------------------------------------------------------ strict base


class StrictModel(BaseModel):
    """Strict, closed, and ``null`` means absent."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        if type(data) is dict:  # the JSON case: copied only when a value is null
            return {k: v for k, v in data.items() if v is not None} if None in data.values() else data
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None}
        return data


# --------------------------------------------------------------------------------------------- rules


def _override_type(hint: Any) -> Any:
    """The request type of one LayoutRules field: bounded ints, finite floats, short strings."""
    if hint is int:
        return Int64
    if hint is float:
        return FiniteFloat
    if hint is str:
        return Annotated[str, Field(max_length=64)]
    if typing.get_origin(hint) is Union or type(hint).__name__ == "UnionType":
        args = [_override_type(a) if a is not type(None) else type(None) for a in typing.get_args(hint)]
        return Union[tuple(args)]  # noqa: UP007 - built from a runtime list
    return hint


_FORMAT_NUMBER = re.compile(r"\d+")


def _check_timestamp_format(value: Any) -> Any:
    """Refuse format specs with huge widths or precisions (``{:>999999999}`` would allocate a GB)."""
    if isinstance(value, str):
        try:
            parsed = list(string.Formatter().parse(value))
        except ValueError as exc:
            raise ValueError(f"timestamp_format is not a valid format string: {exc}") from None
        for _, _, spec, _ in parsed:
            if spec and any(int(n) > 64 for n in _FORMAT_NUMBER.findall(spec)):
                raise ValueError(f"timestamp_format spec {spec!r} asks for a width or precision over 64")
    return value


def _rules_model() -> type[BaseModel]:
    hints = typing.get_type_hints(LayoutRules)
    spec: dict[str, Any] = {}
    for f in dataclass_fields(LayoutRules):
        hint = _RULE_TYPES.get(f.name) or _override_type(hints[f.name])
        if f.name == "timestamp_format":
            hint = Annotated[hint, AfterValidator(_check_timestamp_format)]
        spec[f.name] = (Union[hint, None], None)  # noqa: UP007
    return create_model(  # type: ignore[call-overload, no-any-return]
        "RulesOverrides",
        __config__=ConfigDict(
            extra="forbid",
            strict=True,
            json_schema_extra={"description": "Overrides of the model's LayoutRules (null: keep)."},
        ),
        **spec,
    )


RulesOverrides = _rules_model()
"""Every :class:`mrope.LayoutRules` field, optional: generated, so it follows the library."""


def rules_dict(rules: BaseModel | None) -> dict[str, Any] | None:
    """The overrides a client set (``null`` and absent fields keep the model's value)."""
    if rules is None:
        return None
    return rules.model_dump(exclude_none=True) or None


# ------------------------------------------------------------------------------------------ segments


class TextSegment(StrictModel):
    """A run of text: a token count, token ids, or a string (needs a tokenizer)."""

    type: Literal["text"]
    tokens: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None
    ids: list[Int64] | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TextSegment:
        if (self.tokens is not None) + (self.ids is not None) + (self.text is not None) == 1:
            return self
        given = [k for k in ("tokens", "ids", "text") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a text segment takes exactly one of tokens, ids, text; got {given or 'none'}")
        return self


class TilingOptions(StrictModel):
    """InternVL tiling of an image file (the fields of :class:`mrope.vision.TilePlan`)."""

    tile_size: Count = 448
    min_tiles: Count = 1
    max_tiles: Count = 12
    thumbnail: bool = True


class ImageSegment(StrictModel):
    """An image: its encoder ``grid``, its pixel ``height`` and ``width``, or a media ``path``.

    ``tiles``, ``thumbnail``, ``tile_order``, ``origin``, ``thumbnail_grid`` and ``generate`` go with a grid
    or a size; ``tiling`` and ``crop`` (pixels, top/left/height/width) with a path. ``thumbnail_grid``
    (MiniCPM-V's canvas rule: a thumbnail of its own grid before the tiles) needs ``tiles`` and no
    ``thumbnail``; ``generate`` (GLM-Image: an image the model will generate) takes no ``tiles``.
    """

    type: Literal["image"]
    grid: Grid | None = None
    height: Count | None = None
    width: Count | None = None
    path: MediaPath | None = None
    tiles: Annotated[list[GridDim], Field(min_length=2, max_length=2)] | None = Field(
        None, description="[cols, rows]"
    )
    thumbnail: bool | None = None
    tile_order: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(max_length=65536)] | None
    ) = None
    origin: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(min_length=2, max_length=2)]
        | None
    ) = Field(None, description="[row, col] crop origin in merged tokens (default [0, 0])")
    tiling: bool | TilingOptions | None = Field(None, description="InternVL tiling of a path")
    crop: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(min_length=4, max_length=4)]
        | None
    ) = Field(None, description="[top, left, height, width] in pixels of a path's image")
    wrap: bool = True
    thumbnail_grid: Grid | None = Field(
        None,
        description="MiniCPM-V (canvas rule): the encoder grid [1, h, w] of a thumbnail that comes before the "
        "tiles; needs tiles and no thumbnail",
    )
    generate: bool = Field(
        False,
        description="GLM-Image: an image the model will generate (no prompt tokens; its decode-time positions "
        "come back as generation_ids); after every other segment, no tiles",
    )

    @model_validator(mode="after")
    def _one_form(self) -> ImageSegment:
        if (  # the common forms: a bare grid or a bare size
            self.path is None
            and self.tiling is None
            and self.crop is None
            and self.thumbnail_grid is None
            and not self.generate
            and (self.grid is None) != (self.height is None and self.width is None)
            and (self.height is None) == (self.width is None)
        ):
            return self
        sized = self.height is not None or self.width is not None
        forms = [
            k
            for k, on in (("grid", self.grid is not None), ("size", sized), ("path", self.path is not None))
            if on
        ]
        if len(forms) > 1:
            raise ValueError(
                f"an image segment takes one of grid, height+width, path; got {' and '.join(forms)}"
            )
        if not forms:
            raise ValueError(
                "an image segment needs a grid [t, h, w], both height and width in pixels, or a path"
            )
        if sized and (self.height is None or self.width is None):
            raise ValueError("an image given by size needs both height and width")
        if self.path is not None:
            extra = [
                k
                for k in ("tiles", "thumbnail", "tile_order", "origin", "thumbnail_grid")
                if getattr(self, k) is not None
            ] + (["generate"] if self.generate else [])
            if extra:
                verb = "goes" if len(extra) == 1 else "go"
                raise ValueError(
                    f"{', '.join(extra)} {verb} with a grid or a size; a path takes tiling and crop"
                )
        else:
            extra = [k for k in ("tiling", "crop") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} go with a path; a grid or size takes tiles and origin")
        if self.thumbnail_grid is not None and (self.tiles is None or self.thumbnail):
            got = "no tiles" if self.tiles is None else "thumbnail true"
            raise ValueError(
                "thumbnail_grid (a thumbnail before the tiles) needs tiles [cols, rows] and no thumbnail "
                f"(one after the tiles); got {got}"
            )
        if self.thumbnail_grid is not None and self.thumbnail_grid[0] != 1:
            raise ValueError(f"thumbnail_grid is one frame, [1, h, w]; got {self.thumbnail_grid}")
        if self.generate and self.tiles is not None:
            raise ValueError("generate (an image the model will generate) takes no tiles")
        if self.generate:
            odd = [
                f"{k} {v}"
                for k, v, ok in (
                    ("grid", self.grid, self.grid is None or self.grid[0] == 1),
                    ("origin", self.origin, not self.origin or list(self.origin) == [0, 0]),
                    ("wrap", "false", self.wrap),
                )
                if not ok
            ]
            if odd:
                raise ValueError(
                    "generate (an image the model will generate) is one 2-D target: a grid [1, h, w] or a "
                    f"size, no origin, wrapped; got {', '.join(odd)}"
                )
        return self


class AudioSegment(StrictModel):
    """An audio clip (omni models): its ``tokens``, its duration in ``seconds``, its length in
    ``mel_frames``, or a media ``path`` (an audio file, or a video's audio track) read from its
    container."""

    type: Literal["audio"]
    tokens: Count | None = None
    seconds: Annotated[float, Field(gt=0, le=MAX_AUDIO_SECONDS, allow_inf_nan=False)] | None = None
    mel_frames: Count | None = None
    path: MediaPath | None = None
    wrap: bool = True

    @model_validator(mode="after")
    def _one_form(self) -> AudioSegment:
        forms = [k for k in ("tokens", "seconds", "mel_frames", "path") if getattr(self, k) is not None]
        if len(forms) != 1:
            raise ValueError(
                f"an audio segment takes exactly one of tokens, seconds, mel_frames, path; got {forms or 'none'}"
            )
        return self


class VideoAudio(StrictModel):
    """A video's own audio track given by its length (a grid video's ``audio``)."""

    tokens: Count | None = None
    seconds: Annotated[float, Field(gt=0, le=MAX_AUDIO_SECONDS, allow_inf_nan=False)] | None = None
    mel_frames: Count | None = None

    @model_validator(mode="after")
    def _one_form(self) -> VideoAudio:
        forms = [k for k in ("tokens", "seconds", "mel_frames") if getattr(self, k) is not None]
        if len(forms) != 1:
            raise ValueError(
                f"a video's audio takes exactly one of tokens, seconds, mel_frames; got {forms or 'none'}"
            )
        return self


class VideoSegment(StrictModel):
    """A video: its encoder ``grid`` (with the rate or frame times that made it), or a media ``path``
    (sampled at ``fps`` or to ``nframes`` frames, within ``min_frames .. max_frames``)."""

    type: Literal["video"]
    grid: Grid | None = None
    path: MediaPath | None = None
    fps: Fps | None = None
    second_per_grid: SecondsPerPatch | None = None
    frame_times: Annotated[list[FrameTime], Field(min_length=1, max_length=1 << 22)] | None = None
    nframes: Count | None = None
    min_frames: Count | None = None
    max_frames: Count | None = None
    wrap: bool = True
    audio: VideoAudio | None = Field(None, description="omni models: a grid video's own audio track")
    use_audio_in_video: bool | None = Field(None, description="omni models: a video path's own audio track")
    tiles: Annotated[list[GridDim], Field(min_length=2, max_length=2)] | None = Field(
        None,
        description="MiniCPM-V (canvas rule): [cols, rows] detail slices that split each frame's (h, w); "
        "with thumbnail_grid",
    )
    thumbnail_grid: Grid | None = Field(
        None,
        description="MiniCPM-V (canvas rule): the encoder grid [1, h, w] of each frame's thumbnail, before "
        "its slices; with tiles",
    )

    @model_validator(mode="after")
    def _one_form(self) -> VideoSegment:
        if (  # the common form: a grid with its rate or times, no path options, no sliced frames
            self.path is None
            and self.grid is not None
            and self.use_audio_in_video is None
            and self.nframes is None
            and self.min_frames is None
            and self.max_frames is None
            and self.tiles is None
            and self.thumbnail_grid is None
        ):
            return self
        if (self.grid is None) == (self.path is None):
            raise ValueError("a video segment takes a grid [t, h, w] or a path, exactly one of them")
        if self.audio is not None and self.path is not None:
            raise ValueError("audio goes with a grid; a video path takes use_audio_in_video")
        if self.use_audio_in_video is not None and self.path is None:
            raise ValueError("use_audio_in_video goes with a path; a grid video takes audio")
        if (self.tiles is None) != (self.thumbnail_grid is None):
            given, missing = (
                ("tiles", "thumbnail_grid") if self.thumbnail_grid is None else ("thumbnail_grid", "tiles")
            )
            raise ValueError(
                f"a video's tiles and thumbnail_grid go together (MiniCPM-V's sliced frames); got {given} "
                f"without {missing}"
            )
        if self.thumbnail_grid is not None and self.thumbnail_grid[0] != 1:
            raise ValueError(f"thumbnail_grid is one frame, [1, h, w]; got {self.thumbnail_grid}")
        if self.path is not None:
            extra = [
                k
                for k in ("second_per_grid", "frame_times", "tiles", "thumbnail_grid")
                if getattr(self, k) is not None
            ]
            if extra:
                raise ValueError(f"{', '.join(extra)} go with a grid; a path is timed and sized by its file")
            if self.fps is not None and self.nframes is not None:
                raise ValueError("a video path takes fps or nframes, not both")
        else:
            extra = [k for k in ("nframes", "min_frames", "max_frames") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} go with a path; a grid already counts its frames")
        return self


Segment_ = Annotated[TextSegment | ImageSegment | VideoSegment | AudioSegment, Field(discriminator="type")]  # noqa: UP007
"""One JSON segment (the union, told apart by ``type``)."""


class PositionsRequest(StrictModel):
    """A layout: ``{model, segments, rules}``, the body of ``POST /v1/positions`` and of ``--spec``."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "model": "qwen2.5-vl",
                    "segments": [
                        {"type": "text", "tokens": 12},
                        {"type": "image", "grid": [1, 28, 28]},
                        {"type": "image", "height": 480, "width": 640},
                        {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
                        {"type": "text", "ids": [151644, 77091, 198]},
                    ],
                }
            ]
        },
    )
    model: ModelName
    segments: Annotated[list[Segment_], Field(max_length=1 << 20)]
    rules: RulesOverrides | None = None  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _model_required(cls, data: Any) -> Any:
        return _require_model_key(data)


def _require_model_key(data: Any) -> Any:
    """No silent model: a request without one is refused with the names (not pydantic's 'Field required')."""
    if isinstance(data, Mapping) and data.get("model") is None:
        raise ValueError(f"no model given; name one of {', '.join(model_names())}")
    return data


# ------------------------------------------------------------------------------------------- upload


class FileItem(StrictModel):
    """A place for uploaded file ``index`` (0-based, in the order the ``files`` parts were sent)."""

    type: Literal["file"]
    index: Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]
    wrap: bool = True
    fps: Fps | None = Field(None, description="video sampling rate (default: the model's rules)")
    nframes: Count | None = Field(None, description="video frames to sample (instead of fps)")
    use_audio_in_video: bool = Field(False, description="omni models: a video's own audio track")


LayoutItem = Annotated[Union[TextSegment, FileItem], Field(discriminator="type")]  # noqa: UP007


class UploadFields(StrictModel):
    """The non-file parts of an upload, after JSON decoding of ``layout`` and ``rules``."""

    model: ModelName
    layout: list[LayoutItem] | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _model_required(cls, data: Any) -> Any:
        return _require_model_key(data)


# ------------------------------------------------------------------------------------------ records


class MessageText(StrictModel):
    """Text in a chat message: a string (tokenized) or a token count."""

    type: Literal["text"]
    text: str | None = None
    tokens: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> MessageText:
        if (self.text is None) == (self.tokens is None):
            raise ValueError("a text item takes a 'text' string or a 'tokens' count, exactly one")
        return self


class MessageImage(ImageSegment):
    """An image in a chat message: ``{"type": "image", "image": "cat.jpg"}`` (or ``"path"``)."""

    @model_validator(mode="before")
    @classmethod
    def _image_key(cls, data: Any) -> Any:
        return _rename_media(data, "image")


class MessageVideo(VideoSegment):
    """A video in a chat message: ``{"type": "video", "video": "clip.mp4"}`` (or ``"path"``)."""

    @model_validator(mode="before")
    @classmethod
    def _video_key(cls, data: Any) -> Any:
        return _rename_media(data, "video")


def _rename_media(data: Any, kind: str) -> Any:
    if isinstance(data, Mapping) and data.get(kind) is not None:
        if data.get("path") is not None:
            raise ValueError(f"give the file as {kind!r} or 'path', not both")
        data = {("path" if k == kind else k): v for k, v in data.items()}
    return data


MessageItem = Annotated[Union[MessageText, MessageImage, MessageVideo], Field(discriminator="type")]  # noqa: UP007


class Message(StrictModel):
    """A chat turn: ``role`` and ``content`` (a string, or a list of text, image and video items)."""

    role: Annotated[str, Field(max_length=256)] = ""
    content: Annotated[list[MessageItem], Field(max_length=1 << 20)] = Field(
        default_factory=list, description="a list of text, image and video items, or a string (one text item)"
    )

    @model_validator(mode="before")
    @classmethod
    def _string_content(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("content"), str):
            data = {**data, "content": [{"type": "text", "text": data["content"]}]}
        return data


RecordId = Union[Annotated[str, Field(max_length=4096)], Int64]  # noqa: UP007


class Record(StrictModel):
    """A batch record: ``{id, model, rules, segments | messages}`` (``mrope batch``, the pipeline).

    ``model`` and ``rules`` are used when the job does not set them; exactly one of ``segments`` and
    ``messages``. Other top-level keys are a dataset's own columns (a caption, a split, ...) and are not
    read; inside ``segments`` and ``messages`` every unknown field is refused.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    id: RecordId | None = None
    model: ModelName | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]
    segments: Annotated[list[Segment_], Field(max_length=1 << 20)] | None = None
    messages: Annotated[list[Message], Field(max_length=1 << 20)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Record:
        if (self.segments is None) == (self.messages is None):
            raise ValueError("a record needs exactly one of 'segments' and 'messages'")
        return self


# ------------------------------------------------------------------------------------------ errors


def describe_validation_errors(errors: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A one-line message and a JSON-safe list (``loc``, ``msg``, ``type``) for pydantic errors.

    Union branches (``image``, ``video``, ...) and ``function-after`` wrappers are left out of the
    location; an unknown field reads ``unknown field 'x'``.
    """
    details = []
    for e in errors:
        loc = [p if isinstance(p, (int, str)) else str(p) for p in e.get("loc", ())]
        msg = str(e.get("msg", ""))
        kind = str(e.get("type", ""))
        if kind == "extra_forbidden" and loc:
            msg = f"unknown field {loc[-1]!r}"
            loc = loc[:-1]
        msg = msg.removeprefix("Value error, ")
        if kind == "union_tag_invalid":
            ctx = e.get("ctx") or {}
            msg = f"type must be one of {ctx.get('expected_tags', '?')}; got {ctx.get('tag', '?')!r}"
        details.append({"loc": loc, "msg": msg, "type": kind})
    parts = []
    for d in details[:5]:
        where = _where(d["loc"])
        parts.append(f"{where}: {d['msg']}" if where else d["msg"])
    more = f" (and {len(details) - 5} more)" if len(details) > 5 else ""
    return "; ".join(parts) + more, details


_BRANCHES = {"body", "text", "image", "video", "audio", "file", "str", "list[...]", "int", "bool"}


def _where(loc: Sequence[Any]) -> str:
    out: list[str] = []
    i = 0
    while i < len(loc):
        p = loc[i]
        if (
            p in ("segments", "layout", "messages", "content")
            and i + 1 < len(loc)
            and isinstance(loc[i + 1], int)
        ):
            name = {"segments": "segment", "layout": "layout item", "messages": "message", "content": "item"}[
                p
            ]
            out.append(f"{name} {loc[i + 1]}")
            i += 2
            continue
        if isinstance(p, str) and (p in _BRANCHES or p.startswith(("function-", "list[", "constrained-"))):
            i += 1
            continue
        out.append(str(p))
        i += 1
    return " ".join(out)


def _validate(model: type[BaseModel], data: Any, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, _ = describe_validation_errors(exc.errors())
        raise RequestError(f"{what}: {message}" if what else message) from None


def parse_request(data: Any) -> PositionsRequest:
    """A ``{model, segments, rules}`` layout (raises :class:`RequestError`)."""
    if not isinstance(data, Mapping):
        raise RequestError(
            f"a request must be a JSON object with model and segments; got {type(data).__name__}"
        )
    return _validate(PositionsRequest, data, "")


def parse_record(data: Any) -> Record:
    """A batch record (raises :class:`RequestError`)."""
    if not isinstance(data, Mapping):
        raise RequestError(f"a record must be an object; got {type(data).__name__}")
    return _validate(Record, data, "")


def parse_segments(items: Any) -> list[TextSegment | ImageSegment | VideoSegment]:
    """A list of JSON segments (raises :class:`RequestError`)."""
    if not isinstance(items, list):
        raise RequestError(f"segments must be a list of segment objects; got {type(items).__name__}")
    return list(_validate(_SegmentList, {"segments": items}, "").segments)


class _SegmentList(StrictModel):
    segments: list[Segment_]


# ------------------------------------------------------------------------------------- media access


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) or a ``data:`` URI rather than a local path."""
    return bool(_SCHEME.match(path)) or path[:5].lower() == "data:"


@dataclass(frozen=True)
class MediaAccess:
    """What a face lets a request read for segments given by ``path``.

    Attributes:
        local_files: read local paths (relative ones against ``base_dir``) and ``file://`` URLs.
        urls: read remote URLs (``s3://``, ``gs://``, ``https://``, ... through fsspec) and ``data:``
            URIs.
        url_hosts: when set, only URLs whose host (or ``host:port``) is listed (``data:`` URIs carry
            their bytes and need no host).
        base_dir: the folder relative paths are resolved against.
    """

    local_files: bool = False
    urls: bool = False
    url_hosts: frozenset[str] | None = None
    base_dir: str | None = None

    @classmethod
    def everything(cls, base_dir: str | os.PathLike[str] | None = None) -> MediaAccess:
        """Local files and any URL: the command line and the pipeline."""
        return cls(True, True, None, None if base_dir is None else os.fspath(base_dir))

    def resolve(self, path: str, where: str) -> str:
        """The source to read for ``path`` (an absolute path or the URL), or a :class:`RequestError`
        saying why this face does not read it."""
        scheme = _SCHEME.match(path)
        if path[:5].lower() == "data:":
            if not self.urls:
                raise RequestError(f"{where}: media given as a data: URI are not read here; {self._how()}")
            return path
        if scheme and scheme.group(1).lower() != "file":
            if not self.urls:
                raise RequestError(f"{where}: {_short(path)} is a URL, which is not read here; {self._how()}")
            if self.url_hosts is not None:
                host = _host(path)
                if host not in self.url_hosts and host.split(":")[0] not in self.url_hosts:
                    raise RequestError(
                        f"{where}: the host {host or '(none)'!r} of {_short(path)} is not in the allowlist of "
                        "media hosts"
                    )
            return path
        if not self.local_files:
            raise RequestError(
                f"{where}: {_short(path)} is a local file, which is not read here; {self._how()}"
            )
        if scheme:
            return path
        full = os.path.expanduser(path)
        if not os.path.isabs(full) and self.base_dir is not None:
            full = os.path.join(self.base_dir, full)
        return full

    def _how(self) -> str:
        if not self.local_files and not self.urls:
            return "send sizes or grids (or upload the file)"
        if self.urls:
            return "give a URL of an allowed host"
        return "give a local path"


def _host(url: str) -> str:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return ""


def _short(path: str) -> str:
    return repr(path if len(path) <= 80 else path[:77] + "...")


MEDIA_NONE = MediaAccess()
"""No media reading: what the service uses for segments (unless its URL allowlist is set)."""


# --------------------------------------------------------------------------------------- conversion


def text_from(seg: TextSegment | MessageText, tokenizer: Any, where: str) -> Text:
    """A :class:`mrope.Text` (a string is tokenized with ``tokenizer``; without one, an error)."""
    if seg.text is not None:
        return Text(tokenize(tokenizer, seg.text, where))
    if getattr(seg, "ids", None) is not None:
        return Text(seg.ids)  # type: ignore[union-attr]
    return Text(int(seg.tokens or 0))


def tokenize(tokenizer: Any, text: str, where: str) -> list[int]:
    from mrope.tokenizer import encode_text

    if tokenizer is None:
        raise RequestError(
            f"{where}: text needs a tokenizer to count its tokens: give a tokenizer (a tokenizer.json), "
            "or a 'tokens' count"
        )
    try:
        return encode_text(tokenizer, text)
    except MRopeError as exc:
        raise RequestError(f"{where}: {exc}") from None


def image_from(seg: ImageSegment, rules: LayoutRules, media: MediaAccess, where: str) -> Image:
    """A :class:`mrope.Image`: a grid as given, a size by the rules, a path read from its header."""
    if seg.path is not None:
        from mrope.vision import load_image

        source = media.resolve(seg.path, where)
        tiling = seg.tiling.model_dump() if isinstance(seg.tiling, TilingOptions) else seg.tiling
        return load_image(source, rules=rules, tiling=tiling, crop=seg.crop, wrap=seg.wrap)
    if seg.grid is not None:
        grid = tuple(seg.grid)
    else:
        from mrope.vision import image_grid

        assert seg.height is not None and seg.width is not None  # the model validator guarantees it
        grid = image_grid(seg.height, seg.width, rules=rules)
    return Image(
        grid=grid,  # type: ignore[arg-type]
        tiles=tuple(seg.tiles) if seg.tiles is not None else None,  # type: ignore[arg-type]
        thumbnail=bool(seg.thumbnail),
        tile_order=tuple(seg.tile_order) if seg.tile_order is not None else None,
        origin=tuple(seg.origin) if seg.origin is not None else (0, 0),  # type: ignore[arg-type]
        wrap=seg.wrap,
        generate=seg.generate,
        thumbnail_grid=tuple(seg.thumbnail_grid) if seg.thumbnail_grid is not None else None,  # type: ignore[arg-type]
    )


def video_from(seg: VideoSegment, rules: LayoutRules, media: MediaAccess, where: str) -> Video:
    """A :class:`mrope.Video`: a grid as given, a path sampled from its metadata."""
    if seg.path is not None:
        from mrope.vision import load_video

        source = media.resolve(seg.path, where)
        counts = {
            k: getattr(seg, k) for k in ("nframes", "min_frames", "max_frames") if getattr(seg, k) is not None
        }
        return load_video(
            source,
            rules=rules,
            fps=seg.fps,
            wrap=seg.wrap,
            use_audio_in_video=bool(seg.use_audio_in_video),
            **counts,
        )
    audio = seg.audio
    return Video(
        grid=tuple(seg.grid),  # type: ignore[arg-type]
        fps=seg.fps,
        second_per_grid=seg.second_per_grid,
        frame_times=tuple(seg.frame_times) if seg.frame_times is not None else None,
        wrap=seg.wrap,
        audio=None
        if audio is None
        else Audio(audio.tokens, seconds=audio.seconds, mel_frames=audio.mel_frames),
        tiles=tuple(seg.tiles) if seg.tiles is not None else None,  # type: ignore[arg-type]
        thumbnail_grid=tuple(seg.thumbnail_grid) if seg.thumbnail_grid is not None else None,  # type: ignore[arg-type]
    )


def audio_from(seg: AudioSegment, rules: LayoutRules, media: MediaAccess, where: str) -> Audio:
    """A :class:`mrope.Audio`: a length as given, a path read from its container (omni models)."""
    if seg.path is not None:
        from mrope.vision import load_audio

        return load_audio(media.resolve(seg.path, where), rules=rules, wrap=seg.wrap)
    return Audio(seg.tokens, seconds=seg.seconds, mel_frames=seg.mel_frames, wrap=seg.wrap)


def to_segment(
    seg: TextSegment | ImageSegment | VideoSegment,
    rules: LayoutRules,
    *,
    tokenizer: Any = None,
    media: MediaAccess = MEDIA_NONE,
    where: str = "segment",
) -> Segment:
    """One validated segment -> :class:`mrope.Text` / :class:`mrope.Image` / :class:`mrope.Video`."""
    if isinstance(seg, TextSegment):
        return text_from(seg, tokenizer, where)
    if isinstance(seg, ImageSegment):
        return image_from(seg, rules, media, where)
    if isinstance(seg, AudioSegment):
        return audio_from(seg, rules, media, where)
    return video_from(seg, rules, media, where)


def to_segments(
    items: Sequence[TextSegment | ImageSegment | VideoSegment],
    rules: LayoutRules,
    *,
    tokenizer: Any = None,
    media: MediaAccess = MEDIA_NONE,
) -> list[Segment]:
    """Validated segments -> library segments, in order (media read as ``media`` allows)."""
    return [
        to_segment(seg, rules, tokenizer=tokenizer, media=media, where=f"segment {i}")
        for i, seg in enumerate(items)
    ]


def message_segments(
    messages: Sequence[Message],
    rules: LayoutRules,
    *,
    tokenizer: Any = None,
    media: MediaAccess = MEDIA_NONE,
    turn_format: tuple[str, str] | None = None,
    generation_prompt: str | None = None,
) -> list[Segment]:
    """Chat messages -> library segments, in order.

    Adjacent strings (texts, turn wrappers, the generation prompt) are tokenized together, as a chat
    template renders them; ``turn_format = (prefix, suffix)`` wraps each message's content (``{role}``
    filled in) and ``generation_prompt`` is appended at the end.
    """
    out: list[Segment] = []
    pending: list[str] = []
    origin: list[str] = []

    def add_text(text: str, where: str) -> None:
        if not pending:
            origin[:] = [where]
        pending.append(text)

    def flush() -> None:
        if pending:
            out.append(Text(tokenize(tokenizer, "".join(pending), origin[0])))
            pending.clear()

    for m, message in enumerate(messages):
        where = f"message {m}"
        content = message.content
        items: list[Any] = (
            [MessageText(type="text", text=content)] if isinstance(content, str) else list(content)
        )
        if turn_format is not None:
            add_text(turn_format[0].format(role=message.role), f"{where} (its turn prefix)")
        for c, item in enumerate(items):
            at = f"{where} item {c}"
            if isinstance(item, MessageText):
                if item.tokens is not None:
                    flush()
                    out.append(Text(item.tokens))
                else:
                    add_text(item.text or "", at)
                continue
            flush()
            if isinstance(item, ImageSegment):
                out.append(image_from(item, rules, media, at))
            else:
                out.append(video_from(item, rules, media, at))
        if turn_format is not None:
            add_text(turn_format[1].format(role=message.role), f"{where} (its turn suffix)")
    if generation_prompt:
        add_text(generation_prompt, "the generation prompt")
    flush()
    return out


__all__ = [
    "AudioSegment",
    "FileItem",
    "ImageSegment",
    "LayoutItem",
    "MEDIA_NONE",
    "MediaAccess",
    "Message",
    "PositionsRequest",
    "Record",
    "RequestError",
    "RulesOverrides",
    "TextSegment",
    "UploadFields",
    "VideoSegment",
    "canonical_model",
    "describe_validation_errors",
    "image_from",
    "is_url",
    "message_segments",
    "model_names",
    "parse_record",
    "parse_request",
    "parse_segments",
    "require_model",
    "rules_dict",
    "text_from",
    "to_segment",
    "to_segments",
    "video_from",
]
