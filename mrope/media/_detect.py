"""Tell an image from a video or an audio file by content (the HTTP service uses it for uploads)."""

from __future__ import annotations

import io
from typing import Literal

from PIL import Image as PILImage

from mrope._errors import MediaError
from mrope.media._container import is_still_format, open_container, video_stream
from mrope.media._source import OpenSource

MediaKind = Literal["image", "video", "audio"]

NOT_PICTURE_FORMATS = {"MPEG"}
"""PIL formats it can identify but not read as a picture (an MPEG-1 video stream)."""


def detect_media_kind(data: bytes) -> MediaKind:
    """``"image"`` if PIL can read ``data``'s header, else ``"video"`` if FFmpeg finds a video stream,
    else ``"audio"`` if it finds an audio stream (an audio-only file, for the omni models).

    Only headers are read; nothing is decoded. Animated GIF / WebP / PNG count as images.

    Args:
        data: the file's bytes.

    Raises:
        MediaError: empty data, or neither an image, a video nor audio.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MediaError(f"detect_media_kind takes the file's bytes; got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise MediaError("empty upload (0 bytes); expected an image or a video")
    try:
        im = PILImage.open(io.BytesIO(data))
        if im.format not in NOT_PICTURE_FORMATS:
            if im.size[0] > 0 and im.size[1] > 0:
                return "image"
            raise MediaError(
                f"<{len(data)} bytes>: a {im.format} image of {im.size[0]}x{im.size[1]} pixels; "
                "expected a width and height of at least 1"
            )
    except MediaError:
        raise
    except PILImage.DecompressionBombError as exc:
        raise MediaError(f"<{len(data)} bytes>: {exc} (refused without decoding)") from None
    except Exception:  # not something PIL reads: try it as a video
        pass
    src = OpenSource(io.BytesIO(data), len(data), f"<{len(data)} bytes>")
    try:
        container = open_container(src)
    except MediaError:
        raise MediaError(
            f"{src.name} is neither an image (PIL cannot identify it) nor a video (FFmpeg cannot open it)"
        ) from None
    try:
        fmt = container.format.name
        if is_still_format(fmt):  # FFmpeg sees an image PIL could not read
            raise MediaError(
                f"{src.name} looks like a still image ({fmt}) whose header cannot be read (truncated or "
                "corrupt?); expected a readable image or a video"
            )
        if not container.streams.video and container.streams.audio:
            return "audio"
        video_stream(container, src.name)
    finally:
        container.close()
    return "video"
