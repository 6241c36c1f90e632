"""A video segment, one model per form: by its encoder ``grid`` with the rate or frame times that made it
(:class:`VideoGrid`), by a media ``path`` sampled at ``fps`` or to ``nframes`` frames
(:class:`VideoPath`), or by its ``frames``, a list of images (:class:`VideoFrames`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, model_validator

from mrope._errors import MediaError
from mrope.media._memory import frame_list

from ._fields import (
    AudioSeconds,
    Count,
    Fps,
    FrameTime,
    Grid,
    GridDim,
    MediaPath,
    MediaSource,
    SecondsPerPatch,
    StrictModel,
)
from ._forms import Form, KeepMask, MediaUrl, already_sized, check_sizing, form_union


def _frames_of_array(value: Any) -> Any:
    """A numpy video ``[T, H, W, C]`` as its list of frames (each a numpy image)."""
    if isinstance(value, np.ndarray):
        try:
            return frame_list(value)
        except MediaError as exc:
            raise ValueError(str(exc)) from None
    return value


FrameList = Annotated[
    list[MediaSource], Field(min_length=1, max_length=1 << 16), BeforeValidator(_frames_of_array)
]
"""A video given as its frame images, in order (from Python also in memory: images, or one numpy array
``[T, H, W, C]`` ``uint8``)."""


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


class _Video(Form):
    """What every video form holds: its ``type``, rate, ``wrap`` and pruning mask."""

    type: Literal["video"]
    fps: Fps | None = None
    wrap: bool = True
    keep: KeepMask | None = Field(
        None, description="a pruning mask over the video's tokens (docs/pruning.md)"
    )


class _Sized(StrictModel):
    """The qwen-vl-utils keys that size a video's frames (of a file or a list of images)."""

    min_pixels: Count | None = Field(None, description="qwen-vl-utils: the lower pixel bound of a frame")
    max_pixels: Count | None = Field(None, description="qwen-vl-utils: the upper pixel bound of a frame")
    resized_height: Count | None = Field(None, description="qwen-vl-utils: resize frames to this height")
    resized_width: Count | None = Field(None, description="qwen-vl-utils: resize frames to this width")

    @model_validator(mode="after")
    def _sizing(self) -> _Sized:
        check_sizing(self)
        return self


class VideoGrid(_Video):
    """A video given by its encoder ``grid`` [t, h, w], timed by ``fps``, ``second_per_grid`` or
    ``frame_times``; MiniCPM-V's sliced frames by ``tiles`` with ``thumbnail_grid``."""

    form = "grid"
    keys = ("grid",)
    foreign = (
        already_sized("a video given by grid"),
        (("video_start", "video_end", "frame_size"), "{keys} go with a path"),
        (("use_audio_in_video",), "use_audio_in_video goes with a path; a grid video takes audio"),
        (("nframes", "min_frames", "max_frames"), "{keys} go with a path; a grid already counts its frames"),
    )

    grid: Grid
    second_per_grid: SecondsPerPatch | None = None
    frame_times: Annotated[list[FrameTime], Field(min_length=1, max_length=1 << 22)] | None = None
    audio: VideoAudio | None = Field(None, description="omni models: a grid video's own audio track")
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
    def _sliced_frames(self) -> VideoGrid:
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
        return self


class VideoPath(_Sized, _Video):
    """A video given by a media ``path``: sampled at ``fps`` or to ``nframes`` frames (within
    ``min_frames .. max_frames``), trimmed, sized, with its own audio track on omni models; from Python
    the file may be in memory (its ``bytes``)."""

    form = "path"
    keys = ("path", "video", "video_url", "url")
    foreign = (
        (("audio",), "audio goes with a grid; a video path takes use_audio_in_video"),
        (
            ("second_per_grid", "frame_times", "tiles", "thumbnail_grid"),
            "{keys} go with a grid; a path is timed and sized by its file",
        ),
    )

    path: MediaSource
    nframes: Count | None = None
    min_frames: Count | None = None
    max_frames: Count | None = None
    use_audio_in_video: bool | None = Field(None, description="omni models: a video path's own audio track")
    total_pixels: Count | None = Field(None, description="qwen-vl-utils: the pixel budget of all frames")
    video_start: FrameTime | None = Field(None, description="qwen-vl-utils: trim the file from (seconds)")
    video_end: FrameTime | None = Field(None, description="qwen-vl-utils: trim the file to (seconds)")
    frame_size: Literal["display", "coded"] | None = Field(
        None,
        description="a path's frames as the model gets them: display (rotated, transformers' processors) or "
        "coded (as stored: PyAV, transformers' load_video); default the face's",
    )
    video: MediaSource | FrameList | None = Field(
        None, description="the file, or its frames (a list of images), as qwen-vl-utils names it"
    )
    video_url: MediaPath | MediaUrl | None = Field(
        None, description="the file as a URL string or an OpenAI-style {url} (instead of path)"
    )
    url: MediaPath | None = Field(None, description="the file, as transformers' chat items name it")

    @model_validator(mode="after")
    def _sampling(self) -> VideoPath:
        if self.video_start is not None and self.video_end is not None and self.video_start >= self.video_end:
            raise ValueError(
                f"video_start ({self.video_start}) must come before video_end ({self.video_end})"
            )
        if self.fps is not None and self.nframes is not None:
            raise ValueError("a video path takes fps or nframes, not both")
        return self


class VideoFrames(_Sized, _Video):
    """A video given as its ``frames`` (a list of images, in order), sampled at ``fps`` (``sample_fps``
    under the qwen-vl-utils route: :func:`mrope.media.load_frames`)."""

    form = "frames"
    keys = ("frames",)
    foreign = (
        (
            (
                "second_per_grid",
                "frame_times",
                "nframes",
                "min_frames",
                "max_frames",
                "audio",
                "use_audio_in_video",
                "tiles",
                "thumbnail_grid",
                "video_start",
                "video_end",
                "frame_size",
            ),
            "{keys} {verb} with a grid or a path; a video given as frames takes fps (or sample_fps), "
            "min_pixels, max_pixels, total_pixels, resized_height and resized_width",
        ),
    )

    frames: FrameList = Field(
        description="a video given as its frame images, in order (qwen-vl-utils' list form)"
    )
    sample_fps: Fps | None = Field(
        None, description="qwen-vl-utils route: the frames' rate (that route reads it instead of fps)"
    )
    total_pixels: Count | None = Field(
        None, description="qwen-vl-utils route: the pixel budget of all frames"
    )


VIDEO_FORMS = (VideoGrid, VideoPath, VideoFrames)
"""Every form of a video segment, in the order messages name them."""


def _refuse(named: list[str]) -> str:
    return (
        "a video segment takes a grid [t, h, w] or a path (or frames, a list of images), exactly one of "
        f"them; got {' and '.join(named) or 'none'}"
    )


VideoSegment = form_union("video", VIDEO_FORMS, _refuse, "VideoSegment")
"""A video segment: one of :data:`VIDEO_FORMS`, told apart by which of their keys is present."""
