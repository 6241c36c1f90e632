"""The request models: text, image, video and audio segments, the ``{model, segments, rules}`` layout, and
the non-file fields of an upload.

Unknown fields are refused (a typo is an error, never a silently ignored option), ``null`` means absent,
and types are strict (``"3"`` or ``3.0`` is not an int). These models check the shape of a segment; the
library checks everything about coordinates (grids divisible by the merge size, tiles, frame times, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

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


class MediaUrl(StrictModel):
    """OpenAI's ``{"url": ..., "detail": ...}`` under ``image_url`` / ``video_url`` (``detail`` not read)."""

    url: MediaPath
    detail: Annotated[str, Field(max_length=64)] | None = None


FrameList = Annotated[list[MediaPath], Field(min_length=1, max_length=1 << 16)]
"""A video given as its frame images, in order."""


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
    image: MediaPath | None = Field(None, description="the file, as qwen-vl-utils names it (instead of path)")
    image_url: MediaPath | MediaUrl | None = Field(
        None, description="the file as a URL string or OpenAI's {url} (instead of path)"
    )
    url: MediaPath | None = Field(None, description="the file, as transformers' chat items name it")
    min_pixels: Count | None = Field(None, description="qwen-vl-utils: this image's lower pixel bound")
    max_pixels: Count | None = Field(None, description="qwen-vl-utils: this image's upper pixel bound")
    resized_height: Count | None = Field(
        None, description="qwen-vl-utils: resize to this height (with resized_width), then smart-resize"
    )
    resized_width: Count | None = Field(
        None, description="qwen-vl-utils: resize to this width (with resized_height), then smart-resize"
    )

    @model_validator(mode="after")
    def _one_form(self) -> ImageSegment:
        if (  # the common forms: a bare grid or a bare size
            self.path is None
            and self.min_pixels is None
            and self.max_pixels is None
            and self.resized_height is None
            and self.resized_width is None
            and self.tiling is None
            and self.crop is None
            and self.thumbnail_grid is None
            and not self.generate
            and (self.grid is None) != (self.height is None and self.width is None)
            and (self.height is None) == (self.width is None)
        ):
            return self
        unread = [k for k in ("image", "image_url", "url") if getattr(self, k) is not None]
        if unread:  # set only when this model is validated alone, not inside a request or record
            raise ValueError(
                f"{', '.join(unread)}: give the file as 'path' (other names are read in requests)"
            )
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
        check_sizing(self, self.grid is not None, "an image given by grid")
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
    video: MediaPath | FrameList | None = Field(
        None, description="the file, or its frames (a list of images), as qwen-vl-utils names it"
    )
    video_url: MediaPath | MediaUrl | None = Field(
        None, description="the file as a URL string or an OpenAI-style {url} (instead of path)"
    )
    url: MediaPath | None = Field(None, description="the file, as transformers' chat items name it")
    frames: FrameList | None = Field(
        None, description="a video given as its frame images, in order (qwen-vl-utils' list form)"
    )
    min_pixels: Count | None = Field(None, description="qwen-vl-utils: the lower pixel bound of a frame")
    max_pixels: Count | None = Field(None, description="qwen-vl-utils: the upper pixel bound of a frame")
    total_pixels: Count | None = Field(None, description="qwen-vl-utils: the pixel budget of all frames")
    resized_height: Count | None = Field(None, description="qwen-vl-utils: resize frames to this height")
    resized_width: Count | None = Field(None, description="qwen-vl-utils: resize frames to this width")
    video_start: FrameTime | None = Field(None, description="qwen-vl-utils: trim the file from (seconds)")
    video_end: FrameTime | None = Field(None, description="qwen-vl-utils: trim the file to (seconds)")
    frame_size: Literal["display", "coded"] | None = Field(
        None,
        description="a path's frames as the model gets them: display (rotated, transformers' processors) or "
        "coded (as stored: PyAV, transformers' load_video); default the face's",
    )

    @model_validator(mode="after")
    def _one_form(self) -> VideoSegment:
        if (  # the common form: a grid with its rate or times, no path options, no sliced frames
            self.path is None
            and self.frames is None
            and self.grid is not None
            and self.min_pixels is None
            and self.max_pixels is None
            and self.total_pixels is None
            and self.resized_height is None
            and self.resized_width is None
            and self.video_start is None
            and self.video_end is None
            and self.frame_size is None
            and self.use_audio_in_video is None
            and self.nframes is None
            and self.min_frames is None
            and self.max_frames is None
            and self.tiles is None
            and self.thumbnail_grid is None
        ):
            return self
        unread = [k for k in ("video", "video_url", "url") if getattr(self, k) is not None]
        if unread:  # set only when this model is validated alone, not inside a request or record
            raise ValueError(
                f"{', '.join(unread)}: give the file as 'path' (other names are read in requests)"
            )
        forms = [k for k in ("grid", "path", "frames") if getattr(self, k) is not None]
        if len(forms) != 1:
            raise ValueError(
                "a video segment takes a grid [t, h, w] or a path (or frames, a list of images), exactly one "
                f"of them; got {' and '.join(forms) or 'none'}"
            )
        check_sizing(self, self.grid is not None, "a video given by grid")
        if self.frames is not None:
            extra = [
                k
                for k in (
                    "second_per_grid",
                    "frame_times",
                    "nframes",
                    "min_frames",
                    "max_frames",
                    "audio",
                    "use_audio_in_video",
                    "tiles",
                    "thumbnail_grid",
                    "total_pixels",
                    "video_start",
                    "video_end",
                    "frame_size",
                )
                if getattr(self, k) is not None
            ]
            if extra:
                raise ValueError(
                    f"{', '.join(extra)} {'goes' if len(extra) == 1 else 'go'} with a grid or a path; a video "
                    "given as frames takes fps, min_pixels, max_pixels, resized_height and resized_width"
                )
            return self
        if self.path is None:
            extra = [
                k
                for k in ("total_pixels", "video_start", "video_end", "frame_size")
                if getattr(self, k) is not None
            ]
            if extra:
                raise ValueError(f"{', '.join(extra)} go with a path")
        if self.video_start is not None and self.video_end is not None and self.video_start >= self.video_end:
            raise ValueError(
                f"video_start ({self.video_start}) must come before video_end ({self.video_end})"
            )
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


def check_sizing(seg: ImageSegment | VideoSegment, gridded: bool, what: str) -> None:
    """The qwen-vl-utils sizing keys of an image or a video: not with a grid (already sized), and
    ``resized_height`` with ``resized_width``."""
    keys = [
        k
        for k in ("min_pixels", "max_pixels", "total_pixels", "resized_height", "resized_width")
        if getattr(seg, k, None) is not None
    ]
    if keys and gridded:
        raise ValueError(f"{', '.join(keys)}: {what} is already sized; these keys size a file (or a size)")
    if (seg.resized_height is None) != (seg.resized_width is None):
        raise ValueError("resized_height and resized_width go together")
    if seg.min_pixels is not None and seg.max_pixels is not None and seg.min_pixels > seg.max_pixels:
        raise ValueError(f"min_pixels {seg.min_pixels} is above max_pixels {seg.max_pixels}")


_MEDIA_TYPES = {"image_url": "image", "video_url": "video"}


def media_aliases(data: Any, kind: str) -> Any:
    """The forms users copy from model cards, as this schema's keys: ``"image_url"`` / ``"url"`` (an
    OpenAI ``{"url": ...}`` object or a string) and a ``kind`` key (``"image": "cat.jpg"``) become
    ``path``; a list of files under any of them (a video as its frames) becomes ``frames``; ``type``
    ``"image_url"`` / ``"video_url"`` becomes ``kind``. Exactly one of those keys may be given."""
    if not isinstance(data, Mapping):
        return data
    names = [k for k in (kind, f"{kind}_url", "url", "path") if data.get(k) is not None]
    renamed = isinstance(data.get("type"), str) and data["type"] in _MEDIA_TYPES
    if not renamed and (not names or names == ["path"]) and not isinstance(data.get("path"), list):
        return data
    if len(names) > 1:
        raise ValueError(
            f"give the {kind} as {' or '.join(repr(n) for n in names)}, "
            + ("not both" if len(names) == 2 else "only one of them")
        )
    out = {k: v for k, v in data.items() if k not in names}
    if renamed:
        out["type"] = _MEDIA_TYPES[data["type"]]
    if names:
        value = data[names[0]]
        if isinstance(value, Mapping) and set(value) <= {"url", "detail"} and "url" in value:
            value = value["url"]  # OpenAI's {"image_url": {"url": ..., "detail": ...}}
        if isinstance(value, (list, tuple)) and kind == "video":
            out["frames"] = list(value)
        elif isinstance(value, str):
            out["path"] = value
        else:  # left under the key the user wrote, so that its error names that key
            out[names[0]] = value
    return out


def retype(items: Any) -> Any:
    """A list of segments or message items with the forms users copy read as this schema's
    (:func:`media_aliases`), before the union picks a model by ``type``; the list itself when no item
    needs it (one cheap look per item: the JSON routes' hot path)."""
    if not isinstance(items, list) or not any(map(_aliased, items)):
        return items
    return [media_aliases(v, _MEDIA_TYPES.get(v["type"], v["type"])) if _aliased(v) else v for v in items]


def _aliased(item: Any) -> bool:
    """Whether ``item`` is a media item written with a key or ``type`` :func:`media_aliases` renames."""
    if type(item) is not dict and not isinstance(item, Mapping):
        return False
    kind = item.get("type")
    if kind == "text":
        return False
    if kind == "image":
        return "image" in item or "image_url" in item or "url" in item
    if kind == "video":
        return "video" in item or "video_url" in item or "url" in item or isinstance(item.get("path"), list)
    return isinstance(kind, str) and kind in _MEDIA_TYPES


def retype_segments(data: Any) -> Any:
    """``data`` with its ``segments`` retyped (:func:`retype`)."""
    if isinstance(data, Mapping) and isinstance(data.get("segments"), list):
        items = retype(data["segments"])
        if items is not data["segments"]:
            return {**data, "segments": items}
    return data


Segment_ = Annotated[TextSegment | ImageSegment | VideoSegment | AudioSegment, Field(discriminator="type")]  # noqa: UP007
"""One JSON segment (the union, told apart by ``type``)."""


def require_model_key(data: Any) -> Any:
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
        return require_model_key(data)
