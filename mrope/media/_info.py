"""The records probing returns: :class:`VideoInfo` (a video's frames, rate and sizes) and :class:`AudioInfo`.

They are plain frozen values, apart from the readers, so that frame sampling (:mod:`mrope.media._sampling`)
and the readers (:mod:`mrope.media._video_probe`, :mod:`mrope.media._audio`) can all use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from mrope._errors import MediaError

FrameSize = Literal["display", "coded"]
"""Which frames a video is sized by (see :mod:`mrope.media._video`): ``"display"`` (rotated upright, as
torchcodec and OpenCV hand them over) or ``"coded"`` (as stored, as PyAV, transformers'
``load_video`` and torchvision hand them over)."""
_FRAME_SIZES = get_args(FrameSize)


def check_frame_size(frame_size: object) -> None:
    """Refuse a ``frame_size`` other than ``"display"`` / ``"coded"`` (:class:`~mrope.MediaError`)."""
    if frame_size not in _FRAME_SIZES:
        raise MediaError(f"frame_size must be 'display' or 'coded'; got {frame_size!r}")


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`mrope.media.probe_video` learns about a video without decoding it.

    Attributes:
        fps: average frame rate, frames per second (the header's average rate; for a variable-rate file,
            frames / duration).
        num_frames: frames in the video stream.
        duration: seconds.
        width, height: display size in pixels, after the display rotation (90 / 270 swap them);
            :attr:`coded_size` is the stored frames' size and :meth:`size` either one.
        rotation: display rotation, counter-clockwise degrees, one of 0, 90, 180, 270 (read from the
            MP4 / MOV track header or the Matroska projection; other containers report 0): the
            ``frame.rotation`` PyAV reports on decoded frames, normalised.
        frame_times: for a variable-rate file, every frame's time in seconds from the first frame
            (sorted presentation timestamps); ``None`` for a constant-rate file (time = index / fps).
        start_time: presentation time of the first frame, seconds (used to seek).
        codec: the video codec's name, e.g. ``"h264"``.
        container: the demuxer's name, e.g. ``"mov,mp4,m4a,3gp,3g2,mj2"``.
        timing: ``"header"`` (container metadata only) or ``"packets"`` (counted / timed by demuxing).
    """

    fps: float
    num_frames: int
    duration: float
    width: int
    height: int
    rotation: int = 0
    frame_times: tuple[float, ...] | None = field(default=None, repr=False)
    start_time: float = 0.0
    codec: str = ""
    container: str = ""
    timing: str = "header"

    @property
    def variable_rate(self) -> bool:
        """Whether frames are timed by their timestamps rather than ``index / fps``."""
        return self.frame_times is not None

    @property
    def coded_size(self) -> tuple[int, int]:
        """``(height, width)`` of the coded frames, before the display rotation: the frames PyAV,
        transformers' ``load_video`` (backend ``"pyav"``) and torchvision decode."""
        return (self.width, self.height) if self.rotation in (90, 270) else (self.height, self.width)

    def size(self, frame_size: FrameSize = "display") -> tuple[int, int]:
        """``(height, width)`` in pixels of the frames a reader hands the model: ``"display"`` (after the
        rotation: ``(height, width)``) or ``"coded"`` (:attr:`coded_size`)."""
        check_frame_size(frame_size)
        return (self.height, self.width) if frame_size == "display" else self.coded_size


@dataclass(frozen=True)
class AudioInfo:
    """What :func:`mrope.media.probe_audio` learns about an audio track without decoding it.

    Attributes:
        sample_rate: samples per second of the track.
        num_samples: samples per channel.
        channels: channel count.
        codec: the audio codec's name, e.g. ``"aac"``.
        container: the demuxer's name.
        timing: ``"stream"`` (the stream's duration), ``"packets"`` (the end of the last packet) or
            ``"container"``.
    """

    sample_rate: int
    num_samples: int
    channels: int
    codec: str = ""
    container: str = ""
    timing: str = "stream"

    @property
    def duration(self) -> float:
        """Seconds."""
        return self.num_samples / self.sample_rate


__all__ = ["AudioInfo", "FrameSize", "VideoInfo", "check_frame_size"]
