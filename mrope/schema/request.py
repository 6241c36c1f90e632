"""The request models: text, image, video and audio segments, the ``{model, segments, rules}`` layout, and
the non-file fields of an upload.

Unknown fields are refused (a typo is an error, never a silently ignored option), ``null`` means absent,
and types are strict (``"3"`` or ``3.0`` is not an int). These models check the shape of a segment; the
library checks everything about coordinates (grids divisible by the merge size, tiles, frame times, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, model_validator

from .fields import (
    GRID_DIM_MAX,
    INT64_MAX,
    AudioSeconds,
    Count,
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
    model_names,
)


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
    """InternVL tiling of an image file (the fields of :class:`mrope.media.TilePlan`)."""

    tile_size: Count = 448
    min_tiles: Count = 1
    max_tiles: Count = 12
    thumbnail: bool = True


MAX_KEEP_RUNS = 1 << 22
"""Most runs a run-length ``keep`` mask may list (each at least one token but the first)."""
MAX_KEEP_BITS_CHARS = 1 << 22
"""Most base64 characters of a bitset ``keep`` mask (24 Mi tokens)."""


class KeepMask(StrictModel):
    """A pruning mask over a segment's language-model vision tokens (docs/pruning.md), compact: ``runs``
    (alternating kept / dropped run lengths, kept first: ``[3, 2, 4]`` keeps 3, drops 2, keeps 4; a first 0
    when the first token is dropped) or ``bits`` (base64 of the mask packed 8 tokens a byte, the first
    token in the highest bit, as numpy's ``packbits``) with its ``length``. Its length must be the
    segment's token count; it is checked against the segment's grid before it is decoded."""

    runs: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(max_length=MAX_KEEP_RUNS)] | None
    ) = None
    bits: Annotated[str, Field(max_length=MAX_KEEP_BITS_CHARS)] | None = None
    length: Annotated[int, Field(ge=0, le=6 * MAX_KEEP_BITS_CHARS)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> KeepMask:
        if (self.runs is None) == (self.bits is None):
            raise ValueError("a keep mask takes runs or bits, exactly one of them")
        if (self.bits is None) != (self.length is None):
            raise ValueError("a keep mask's bits go with its length (and runs without one)")
        if self.runs is not None and any(n == 0 for n in self.runs[1:]):
            raise ValueError("a keep mask's runs after the first must be >= 1")
        return self

    @property
    def size(self) -> int:
        """How many tokens the mask covers."""
        return sum(self.runs) if self.runs is not None else int(self.length or 0)


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
    keep: KeepMask | None = Field(
        None, description="a pruning mask over the image's tokens (docs/pruning.md)"
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
    seconds: AudioSeconds | None = None
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
    seconds: AudioSeconds | None = None
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
    keep: KeepMask | None = Field(
        None, description="a pruning mask over the video's tokens (docs/pruning.md)"
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
