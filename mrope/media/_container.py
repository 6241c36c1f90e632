"""Open a media source with PyAV: the one place FFmpeg is handed a file, and the check for its video stream.

Every reader (video, audio, detection) demuxes through :func:`open_container`, which gives FFmpeg the
byte stream :func:`mrope.media._source.open_source` opened and refuses any other resource the file asks for
(playlists, references), so a path or an upload can never make FFmpeg read a URL or another file.
"""

from __future__ import annotations

from typing import Any

import av

from mrope._errors import MediaError
from mrope.media._source import OpenSource

STILL_FORMATS = ("image2", "image2pipe")
"""FFmpeg demuxers of still images (besides the ``*_pipe`` ones)."""


def is_still_format(format_name: str) -> bool:
    """Whether an FFmpeg demuxer name is a still-image reader (``image2``, ``png_pipe``, ...), not a video."""
    return format_name in STILL_FORMATS or format_name.endswith("_pipe")


def _refuse_nested_open(url: str, flags: int, options: dict[str, Any]) -> Any:
    raise MediaError(f"the media file asks to open another resource ({url!r}); refused")


_JPEG_SOI = b"\xff\xd8"


_MAX_BOXES = 64


def _mp4_cut(src: OpenSource) -> str | None:
    """Where an MP4 / MOV (an ISO BMFF file: ``ftyp`` first) is cut short: a top-level box that runs past
    the end of the file, or no ``moov`` box (the index every frame is found by); ``None`` when its top
    level is whole or it is no such file. Box headers only (ISO/IEC 14496-12 4.2: 32-bit size and type,
    size 1: a 64-bit size follows, size 0: to the end of the file)."""
    f, size = src.file, src.size
    f.seek(0)
    if f.read(8)[4:8] != b"ftyp":
        return None
    pos, kinds = 0, set()
    for _ in range(_MAX_BOXES):
        if pos + 8 > size:
            break
        f.seek(pos)
        head = f.read(16)
        length, kind = int.from_bytes(head[:4], "big"), head[4:8]
        if length == 1 and len(head) == 16:
            length = int.from_bytes(head[8:16], "big")
        elif length == 0:
            length = size - pos
        if length < 8:
            return f"its {kind.decode('latin-1')!r} box at byte {pos} has an impossible size {length}"
        kinds.add(kind)
        if pos + length > size:
            return (
                f"it is truncated: its {kind.decode('latin-1')!r} box at byte {pos} needs {length} bytes and "
                f"the file ends after {size - pos}"
            )
        pos += length
    if b"moov" not in kinds:
        return "it has no 'moov' box (the index of its frames): truncated before it was written, or damaged"
    return None


def _why(src: OpenSource, exc: Exception) -> str:
    """What FFmpeg's refusal means for a user, without its raw error number."""
    where = _mp4_cut(src)
    if where is not None:
        return f"an MP4 / MOV file, but {where}; expected a complete video file"
    text = getattr(exc, "strerror", None) or str(exc)
    return f"FFmpeg: {text} (a truncated or damaged file, or no video at all)"


def open_container(src: OpenSource) -> av.container.InputContainer:
    """Open a media source with PyAV for demuxing (shared by the video, audio and detection readers)."""
    src.file.seek(0)
    head = src.file.read(len(_JPEG_SOI))
    src.file.seek(0)
    try:
        container = av.open(src.file, mode="r", io_open=_refuse_nested_open, metadata_errors="replace")
    except MediaError:
        raise
    except Exception as exc:  # FFmpeg reports hostile bytes with many error types
        raise MediaError(f"{src.name} is not a readable video: {_why(src, exc)}") from None
    if container.format.name == "mjpeg" and head != _JPEG_SOI:
        # FFmpeg's raw MJPEG reader scans for a JPEG anywhere (e.g. one stored in a zip archive); a
        # raw MJPEG stream starts with a JPEG start-of-image marker
        container.close()
        raise MediaError(
            f"{src.name} is not a video: FFmpeg found JPEG data inside it, but it does not start like an "
            f"MJPEG stream (first bytes {head!r}, expected {_JPEG_SOI!r})"
        )
    return container


def stream_kinds(container: av.container.InputContainer) -> str:
    """The kinds of stream a container holds, for messages: ``"audio, video"`` (``"none"`` if it has none)."""
    return ", ".join(sorted({s.type for s in container.streams}) or ["none"])


def video_stream(container: av.container.InputContainer, name: str) -> av.video.stream.VideoStream:
    """The container's video stream, or a :class:`~mrope.MediaError` naming ``name`` when it has none or is
    a still image."""
    fmt = container.format.name
    if is_still_format(fmt):
        raise MediaError(f"{name} is a still image ({fmt}), not a video")
    if not container.streams.video:
        raise MediaError(f"{name} has no video stream (streams: {stream_kinds(container)}); expected a video")
    stream = container.streams.video[0]
    if stream.codec_context is None:
        raise MediaError(f"{name}: its video codec is not supported by this FFmpeg build")
    return stream


__all__ = ["STILL_FORMATS", "is_still_format", "open_container", "stream_kinds", "video_stream"]
