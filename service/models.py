"""Pydantic models of the requests and responses (they make the OpenAPI schema).

Requests reject unknown fields, so a typo is a 422 and never a silently ignored option, and they are
strict: ``"3"`` or ``3.0`` is not an integer and ``1`` is not a boolean, exactly as the schema says. Numbers are
bounded to what the library can hold (int64 token ids, finite floats); the library itself checks
everything about coordinates (grids divisible by the merge size, tiles, frame times, ...).
"""

from __future__ import annotations

import re
import string
import typing
from dataclasses import fields as dataclass_fields
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from mrope.rules import PRESET_NAMES, LayoutRules

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
GRID_DIM_MAX = 2**31 - 1

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
GridDim = Annotated[int, Field(ge=1, le=GRID_DIM_MAX)]
Grid = Annotated[list[GridDim], Field(min_length=3, max_length=3, description="encoder patch grid [t, h, w]")]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# Time values are bounded to physically plausible ranges: with the token and segment caps they keep
# every position far inside int64 (the library computes t offsets in int64 and does not check them).
MAX_FPS = 1000.0
MIN_FPS = 1e-3
MAX_SECONDS_PER_PATCH = 3600.0
MAX_FRAME_TIME = 1e7
MAX_TOKENS_PER_SECOND = 1000.0
Fps = Annotated[float, Field(ge=MIN_FPS, le=MAX_FPS, allow_inf_nan=False, description="frames per second")]
SecondsPerPatch = Annotated[float, Field(gt=0, le=MAX_SECONDS_PER_PATCH, allow_inf_nan=False)]
FrameTime = Annotated[float, Field(ge=0, le=MAX_FRAME_TIME, allow_inf_nan=False)]
_RULE_TYPES: dict[str, Any] = {
    "fps": Fps,
    "tokens_per_second": Annotated[float, Field(gt=0, le=MAX_TOKENS_PER_SECOND, allow_inf_nan=False)],
}

ModelName = Literal[PRESET_NAMES]  # type: ignore[valid-type]
"""A preset name: the enum in the schema is the library's preset list."""

_STRICT = ConfigDict(extra="forbid", strict=True)


# ----------------------------------------------------------------------------------------- rules


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
            json_schema_extra={"description": "Overrides of the model preset's LayoutRules (null: keep)."},
        ),
        **spec,
    )


RulesOverrides = _rules_model()
"""Every :class:`mrope.LayoutRules` field, optional: generated, so it follows the library."""


def rules_dict(rules: BaseModel | None) -> dict[str, Any] | None:
    """The overrides a client set (``null`` and absent fields keep the preset's value)."""
    if rules is None:
        return None
    return rules.model_dump(exclude_none=True)


# -------------------------------------------------------------------------------------- segments


class TextSegment(BaseModel):
    """A run of text: a token count, token ids, or a string (needs ``MROPE_TOKENIZER``)."""

    model_config = _STRICT
    type: Literal["text"]
    tokens: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None
    ids: list[Int64] | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TextSegment:
        given = [k for k in ("tokens", "ids", "text") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a text segment takes exactly one of tokens, ids, text; got {given or 'none'}")
        return self


class ImageSegment(BaseModel):
    """An image: its encoder ``grid``, or its pixel ``height`` and ``width`` (sized by the model's rules)."""

    model_config = _STRICT
    type: Literal["image"]
    grid: Grid | None = None
    height: Annotated[int, Field(ge=1, le=GRID_DIM_MAX)] | None = None
    width: Annotated[int, Field(ge=1, le=GRID_DIM_MAX)] | None = None
    tiles: Annotated[list[GridDim], Field(min_length=2, max_length=2)] | None = Field(
        None, description="[cols, rows]"
    )
    thumbnail: bool = False
    tile_order: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(max_length=65536)] | None
    ) = None
    origin: Annotated[
        list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(min_length=2, max_length=2)
    ] = Field(default_factory=lambda: [0, 0], description="[row, col] crop origin in merged tokens")
    wrap: bool = True

    @model_validator(mode="after")
    def _grid_or_size(self) -> ImageSegment:
        sized = self.height is not None or self.width is not None
        if self.grid is not None and sized:
            raise ValueError("an image segment takes a grid, or height and width, not both")
        if self.grid is None and (self.height is None or self.width is None):
            raise ValueError("an image segment needs a grid [t, h, w], or both height and width in pixels")
        return self


class VideoSegment(BaseModel):
    """A video as its encoder grid, with the sampling rate or frame times that made it."""

    model_config = _STRICT
    type: Literal["video"]
    grid: Grid
    fps: Fps | None = None
    second_per_grid: SecondsPerPatch | None = None
    frame_times: Annotated[list[FrameTime], Field(min_length=1)] | None = None
    wrap: bool = True


Segment = Annotated[Union[TextSegment, ImageSegment, VideoSegment], Field(discriminator="type")]  # noqa: UP007


class PositionsRequest(BaseModel):
    """``POST /v1/positions``: segments in sequence order."""

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
    segments: list[Segment]
    rules: RulesOverrides | None = None  # type: ignore[valid-type]


# ------------------------------------------------------------------------------------ rope-index


class RopeIndexRequest(BaseModel):
    """``POST /v1/rope-index``: the token-id form, as ``get_rope_index`` takes it."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "model": "qwen2-vl",
                    "input_ids": [[1, 151652, 151655, 151655, 151655, 151655, 151653, 2]],
                    "image_grid_thw": [[1, 4, 4]],
                }
            ]
        },
    )
    model: ModelName
    input_ids: list[list[Int64]]
    image_grid_thw: list[Grid] | None = None
    video_grid_thw: list[Grid] | None = None
    attention_mask: list[list[Annotated[int, Field(ge=0, le=1)]]] | None = None
    second_per_grid_ts: list[SecondsPerPatch] | None = None
    mm_token_type_ids: list[list[Annotated[int, Field(ge=0, le=2)]]] | None = None
    audio_seqlens: Annotated[list[Annotated[int, Field(ge=1, le=2**31)]], Field(max_length=65536)] | None = (
        Field(None, description="omni models: mel-frame length of every audio clip in order")
    )
    use_audio_in_video: bool | None = None
    pad_position: Int64 = 1
    rules: RulesOverrides | None = None  # type: ignore[valid-type]


# ---------------------------------------------------------------------------------------- upload


class FileItem(BaseModel):
    """A place for uploaded file ``index`` (0-based, in the order the ``files`` parts were sent)."""

    model_config = _STRICT
    type: Literal["file"]
    index: Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]
    wrap: bool = True
    fps: Fps | None = Field(None, description="video sampling rate (default: the model's rules)")
    nframes: Annotated[int, Field(ge=1, le=GRID_DIM_MAX)] | None = Field(
        None, description="video frames to sample (instead of fps)"
    )
    use_audio_in_video: bool = Field(
        False, description="omni models: interleave a video's own audio track with its frames"
    )


LayoutItem = Annotated[Union[TextSegment, FileItem], Field(discriminator="type")]  # noqa: UP007


class UploadFields(BaseModel):
    """The non-file parts of an upload, after JSON decoding of ``layout`` and ``rules``."""

    model_config = _STRICT
    model: ModelName
    layout: list[LayoutItem] | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]


def upload_form_schema() -> dict[str, Any]:
    """OpenAPI schema of the multipart body of ``POST /v1/positions/upload``."""
    return {
        "type": "object",
        "required": ["model", "files"],
        "properties": {
            "model": {"type": "string", "enum": list(PRESET_NAMES)},
            "files": {
                "type": "array",
                "items": {"type": "string", "format": "binary"},
                "description": "images and videos, told apart by their content",
            },
            "layout": {
                "type": "string",
                "description": (
                    'JSON list ordering text around the files, e.g. [{"type":"text","tokens":5},'
                    '{"type":"file","index":0},{"type":"text","text":"hello"}]; default: the files in order'
                ),
            },
            "rules": {"type": "string", "description": "JSON object of LayoutRules overrides"},
        },
    }


# -------------------------------------------------------------------------------------- responses


class SpanOut(BaseModel):
    kind: str = Field(description="text, wrapper, timestamp, image, video or thumbnail")
    start: int
    stop: int
    index: int = Field(description="index of the segment (or layout item) that made the span")
    grid: list[int] | None = Field(None, description="LLM grid [T', H', W'] of a vision span")
    tile: list[int] | None = Field(None, description="[row, col] of a tile")


class PositionsResponse(BaseModel):
    positions: list[list[int]] = Field(description="[3][T] rows t, h, w")
    delta: int = Field(description="max(positions) + 1 - T: decode token i >= T gets i + delta")
    num_tokens: int
    spans: list[SpanOut]
    image_grid_thw: list[list[int]]
    video_grid_thw: list[list[int]]
    second_per_grid_ts: list[float]
    notes: list[str]


class FileOut(BaseModel):
    index: int
    filename: str | None
    kind: Literal["image", "video"]
    bytes: int
    width: int
    height: int
    grid: list[int] = Field(description="encoder grid [t, h, w] derived from the file")
    fps: float | None = Field(None, description="video: the sampling rate used")
    duration: float | None = Field(None, description="video: seconds, from the container")
    num_frames: int | None = Field(None, description="video: frames in the file")
    sampled_frames: int | None = Field(None, description="video: frames the grid covers")


class UploadResponse(PositionsResponse):
    files: list[FileOut]


class RopeIndexResponse(BaseModel):
    position_ids: list[list[list[int]]] = Field(description="[3][B][L]")
    deltas: list[int] = Field(description="[B]")


class ErrorBody(BaseModel):
    code: str
    message: str
    cap: str | None = Field(None, description="the environment variable of an exceeded limit")
    limit: float | None = None
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class PresetOut(BaseModel):
    spec: dict[str, Any]
    rules: dict[str, Any]


class PresetsResponse(BaseModel):
    presets: dict[str, PresetOut]


class HealthResponse(BaseModel):
    status: Literal["ok"]
    version: str
