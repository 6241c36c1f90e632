"""The service's own wire models: the token-id request, the responses and the upload form (the OpenAPI schema).

Segments, layouts and upload fields are :mod:`mrope.schema`'s, the one definition every face uses
(strict, closed, ``null`` = absent); this module adds only what the HTTP face alone has. The library
itself checks everything about coordinates (grids divisible by the merge size, tiles, frame times, ...).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mrope.media import MediaKind
from mrope.schema import ConversationStateBody, RulesOverrides
from mrope.schema._fields import Grid, Int64, ModelName, SecondsPerPatch, model_names
from mrope.schema._sets import LayerSetsField

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
    layer_sets: LayerSetsField = None


# ---------------------------------------------------------------------------------------- upload


def upload_form_schema() -> dict[str, Any]:
    """OpenAPI schema of the multipart body of ``POST /v1/positions/upload``."""
    return {
        "type": "object",
        "required": ["model", "files"],
        "properties": {
            "model": {"type": "string", "enum": list(model_names())},
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
            "layer_sets": {
                "type": "string",
                "description": "JSON true (every position set of the model) or {sets, pattern} (sets of "
                "the request's own), as the layer_sets of POST /v1/positions",
            },
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


class MediaOut(BaseModel):
    kind: str = Field(description="image, or video (a video file or a list of frame images)")
    route: str = Field(description="whose pipeline's loader read it (processor, qwen-vl-utils, vllm)")
    size: list[int] = Field(
        description="[height, width] in pixels after the resize (one frame's, for a video)"
    )
    frames: int = Field(description="frames read: a video's sampled frames or frame images, 1 for an image")
    sources: dict[str, str] = Field(
        description="where each sizing value came from (record key, route default, checkpoint file and key, "
        "the preset, or the rules)"
    )


class PositionSetOut(BaseModel):
    """One sequence's positions and what goes with them (a whole answer, or one set of ``layer_sets``)."""

    positions: list[list[int]] | list[list[float]] = Field(
        description="[3][T] rows t, h, w (numbers with a fraction under Qwen3-Omni's fractional time)"
    )
    delta: int | float = Field(description="max(positions) + 1 - T: decode token i >= T gets i + delta")
    num_tokens: int
    spans: list[SpanOut]
    image_grid_thw: list[list[int]]
    video_grid_thw: list[list[int]]
    second_per_grid_ts: list[float]
    notes: list[str]
    audio_tokens: list[int] | None = Field(
        None,
        description="omni models (rules with audio): tokens of each audio clip in order; absent otherwise",
    )
    generation_ids: list[list[int]] | None = Field(
        None,
        description="GLM-Image, when the segments hold images to generate: [3][n + 1] the decode-time positions "
        "of the n generated image tokens (last target first) and of the end marker after them; absent "
        "otherwise",
    )


class PositionsResponse(PositionSetOut):
    media: list[MediaOut | None] = Field(
        description="one entry per image and video segment, in order: how the service read and sized it "
        "(mrope.media.MediaRecord), null for one given by its grid; JSON answers only (npy and program "
        "answers carry no media)"
    )
    state: ConversationStateBody | None = Field(
        None,
        description="with return_state: the conversation's state after these tokens; send it back as the "
        "next turn's state (npy: the X-MRope-State header)",
    )


class PositionSetsResponse(BaseModel):
    """The answer to a request with ``layer_sets``: every position set and the layer pattern."""

    position_sets: dict[str, PositionSetOut] = Field(
        description="set name -> its positions and fields, in the order the model (or the request) names them"
    )
    layer_pattern: list[str] = Field(
        description="the set each decoder layer reads, repeated over the layers: layer i reads "
        "layer_pattern[i % len]; 'nope' is a layer without rotary (cos 1, sin 0)"
    )
    media: list[MediaOut | None] = Field(description="as in a positions answer (the sets share their media)")


class FileOut(BaseModel):
    index: int
    filename: str | None
    kind: MediaKind
    bytes: int
    route: str | None = Field(
        None,
        description="image and video: whose pipeline's loader read the file (processor, qwen-vl-utils, vllm)",
    )
    width: int | None = Field(
        None,
        description="image and video: pixels as read (an image's EXIF orientation as the route applies it)",
    )
    height: int | None = Field(None, description="image and video: pixels, as width")
    rotation: int | None = Field(None, description="video: display rotation, counter-clockwise degrees")
    native_fps: float | None = Field(None, description="video: the file's own frame rate")
    grid: list[int] | None = Field(
        None, description="image and video: encoder grid [t, h, w] derived from the file"
    )
    resized: list[int] | None = Field(
        None, description="image and video: [height, width] in pixels the model is given (grid x patch size)"
    )
    sources: dict[str, str] | None = Field(
        None,
        description="image and video: where each sizing value came from (record key, route default, checkpoint "
        "file and key, or the preset)",
    )
    fps: float | None = Field(None, description="video: the sampling rate used")
    duration: float | None = Field(None, description="video and audio: seconds, from the container")
    num_frames: int | None = Field(None, description="video: frames in the file")
    sampled_frames: int | None = Field(None, description="video: frames the grid covers")
    audio_mel_frames: int | None = Field(
        None, description="omni models: mel frames of a video's own audio track"
    )
    sample_rate: int | None = Field(None, description="audio: samples per second, from the container")
    mel_frames: int | None = Field(None, description="audio (omni models): mel frames of the clip")


class UploadResponse(PositionsResponse):
    files: list[FileOut]


class UploadSetsResponse(PositionSetsResponse):
    """The answer to an upload with ``layer_sets``: every position set, the pattern and the files read."""

    files: list[FileOut]


class RopeIndexResponse(BaseModel):
    position_ids: list[list[list[int]]] = Field(description="[3][B][L]")
    deltas: list[int] = Field(description="[B]")


class RopeIndexSetOut(BaseModel):
    """One position set of a rope-index answer with ``layer_sets``."""

    position_ids: list[list[list[int]]] | list[list[list[float]]] = Field(description="[3][B][L]")
    deltas: list[int] | list[float] = Field(description="[B]")


class RopeIndexSetsResponse(BaseModel):
    """The answer to a rope-index request with ``layer_sets``: every position set and the layer pattern."""

    position_sets: dict[str, RopeIndexSetOut] = Field(
        description="set name -> its position_ids and deltas, in the order the model (or the request) names them"
    )
    layer_pattern: list[str] = Field(description="as in a positions answer with layer_sets")


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
    learned_rotary: dict[str, str] | None = Field(
        None,
        description="where part of the rotation is a checkpoint tensor (Falcon-OCR's freqs_cis_golden): "
        "'buffer' (its name) and 'table' (the mrope op that applies it); spec is then only the formula half",
    )


class PresetsResponse(BaseModel):
    presets: dict[str, PresetOut]


class HealthResponse(BaseModel):
    status: Literal["ok"]
    version: str
