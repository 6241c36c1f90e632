"""What each video reader hands a processor: the frame count, frame rate and frame orientation it reports.

A transformers 5.24 video processor samples frames from the ``VideoMetadata`` its loader returns
(``total_num_frames``, ``fps``) and sizes the frames the loader decoded, so the grid follows the loader,
not the file. :func:`reader_info` reads a file as one named loader does and returns a
:class:`~mrope.media.VideoInfo` with that loader's count and rate, plus the orientation of its frames;
``load_video(..., reader=...)`` sizes the video from it. Counts never come from a header that can lie:
every reader here counts frames from the stream (a packet scan, at most ``max_packets``). The loaders
(transformers 5.24 ``video_utils.py``):

- ``"torchcodec"`` (``read_video_torchcodec``; ``VideoDecoder(seek_mode="exact")``): the frames counted
  by its scan (one a packet), ``average_fps = num_frames / (end - begin)`` where ``begin`` is the
  smallest packet timestamp and ``end`` the largest timestamp plus duration (torchcodec
  ``_core/Metadata.cpp`` ``get_average_fps``), and frames rotated upright, the display size (its
  documented behaviour: "TorchCodec automatically applies this rotation during decoding"; its
  ``width`` / ``height`` are post-rotation; OpenCV's FFmpeg capture rotates too). It is the
  loader every family's processor uses for a video path or URL (``fetch_videos``,
  ``video_processing_utils.py:566``), so the default of every family.
- ``"pyav"`` (``read_video_pyav``, the default backend of ``transformers.video_utils.load_video``):
  every frame PyAV decodes, ``fps = stream.average_rate`` (FFmpeg's estimate: for a variable-rate file
  it can be far from frames / duration), coded frames (PyAV does not rotate). transformers itself takes
  the count from the header (``stream.frames``), which Matroska and WebM leave at 0 (its sampler then
  fails); mrope counts the frames PyAV decodes, what a processor gets when the decoded frames are
  passed as arrays.
- ``"torchvision"`` (``read_video_torchvision``, ``torchvision.io.read_video``, the processors'
  fallback when torchcodec cannot load, removed in torchvision 0.26): decodes every frame with PyAV,
  ``info["video_fps"] = float(stream.average_rate)``, coded frames.
- ``"decord"`` (``read_video_decord``; decord 0.6.0 from PyPI, run in ``tests/media/test_routes.py``):
  ``len(vr)`` counts the stream's packets (``IndexKeyframes``), ``get_avg_fps()`` is the stream's
  ``avg_frame_rate``. It turns MP4 / MOV frames upright by their display rotation (90, 180, 270: the
  display size) and does not rotate Matroska (coded frames). On some frame sizes of a 90 / 270 file
  (coded 96 x 48 and 64 x 48, not 128 x 64 or 320 x 240) its ``get_batch`` fails a copy-size check
  (``DECORDError``: qwen-vl-utils then falls back to torchvision, coded frames); mrope cannot tell those
  sizes from the header and sizes such a file as decord reads the others.

``reader=None`` (the default of :func:`~mrope.media.load_video`) keeps mrope's metadata probe
(:func:`~mrope.media.probe_video`: the header's count and rate where they are whole, packet timing
where they are not, display size): torchcodec's orientation, read without a packet scan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, get_args

from mrope._errors import MediaError
from mrope._route import Reader
from mrope.media._container import open_container, video_stream
from mrope.media._info import FrameSize, VideoInfo
from mrope.media._packets import scan_packets
from mrope.media._source import open_source

"""A video loader transformers 5.24 can decode with (``transformers.video_utils.VIDEO_DECODERS``)."""
READERS: tuple[str, ...] = get_args(Reader)

DEFAULT_READER: Reader = "torchcodec"
"""The loader every family's transformers 5.24 video processor uses for a video path or URL."""

_ORIENTATION: dict[str, FrameSize] = {
    "torchcodec": "display",
    "pyav": "coded",
    "torchvision": "coded",
    "decord": "coded",  # Matroska; MP4 / MOV frames come upright (see reader_info)
}


@dataclass(frozen=True)
class ReaderInfo:
    """A file as one loader reads it.

    Attributes:
        reader: the loader's name.
        info: the file's :class:`VideoInfo` with the loader's ``num_frames`` and ``fps`` (and no
            ``frame_times``: processors time frame ``i`` as ``i / fps``, ``VideoMetadata.timestamps``).
        frame_size: the orientation of the frames the loader returns, ``"display"`` or ``"coded"``.
    """

    reader: str
    info: VideoInfo
    frame_size: FrameSize

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` of the frames the loader returns."""
        return self.info.size(self.frame_size)


def check_reader(reader: object) -> None:
    """Refuse a loader name other than those in :data:`READERS` (:class:`~mrope.MediaError`)."""
    if reader not in READERS:
        raise MediaError(f"reader must be one of {', '.join(map(repr, READERS))}; got {reader!r}")


def _scan(source: Any, max_packets: int) -> tuple[int, float | None, float | None, float | None]:
    """Demux the video stream (no decode): packet count, average rate, and the stream's first timestamp
    and last timestamp plus duration in seconds (``None`` without timestamps)."""
    with open_source(source) as src:
        container = open_container(src)
        try:
            stream = video_stream(container, src.name)
            rate = stream.average_rate
            avg = float(rate) if rate is not None and rate.denominator and float(rate) > 0 else None
            tb = float(stream.time_base) if stream.time_base else None
            scan = scan_packets(container, stream, max_packets, src.name)
        finally:
            container.close()
    if scan.truncated:
        raise MediaError(
            f"{src.name}: more than {max_packets} packets in the video stream; pass a larger max_packets to "
            "count them"
        )
    if scan.count == 0:
        raise MediaError(f"{src.name}: the video stream holds no frames")
    if tb is None or scan.first is None or scan.end is None:
        return scan.count, avg, None, None
    return scan.count, avg, scan.first * tb, scan.end * tb


def reader_info(source: Any, reader: Reader, info: VideoInfo, *, max_packets: int) -> ReaderInfo:
    """Read a video as the loader ``reader`` does (see the module docstring for each one).

    Args:
        source: a path, bytes or binary file-like object.
        reader: ``"torchcodec"``, ``"pyav"``, ``"torchvision"`` or ``"decord"``.
        info: the file's :func:`~mrope.media.probe_video` result (its sizes and rotation).
        max_packets: most packets demuxed to count frames (:func:`~mrope.media.load_video` passes
            :data:`~mrope.media._video_probe.DEFAULT_MAX_PACKETS`).

    Raises:
        MediaError: an unknown reader; a file the loader cannot read the way it would be fed (no frame
            rate for the PyAV-based loaders); too many packets.
    """
    check_reader(reader)
    if isinstance(source, VideoInfo):
        raise MediaError(f"reader={reader!r} reads the file itself; pass the file, not a VideoInfo")
    count, avg, begin, end = _scan(source, max_packets)
    if reader == "torchcodec":
        span = end - begin if begin is not None and end is not None else 0.0
        fps = count / span if span > 0 else avg
    else:
        fps = avg
    if fps is None:
        raise MediaError(
            f"{reader} reports no frame rate for this video (its average rate is unset), so its processor "
            "cannot sample it by fps; pass nframes= or another reader"
        )
    seen = replace(
        info, fps=float(fps), num_frames=count, duration=count / fps, frame_times=None, timing="packets"
    )
    upright = reader == "decord" and info.container.startswith("mov")  # decord rotates MP4 / MOV only
    return ReaderInfo(reader, seen, "display" if upright else _ORIENTATION[reader])


__all__ = ["DEFAULT_READER", "READERS", "Reader", "ReaderInfo", "check_reader", "reader_info"]
