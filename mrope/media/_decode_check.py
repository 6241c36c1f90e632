"""The optional decode check of the faces: a media file's pixels decoded, to prove the file is whole.

Positions need headers only, so a JPEG cut in half sizes like the whole file and fails later, in the
model's processor. :func:`check_decodes` decodes it (every pixel of an image; the sampled frames of a
video, by the frame indices :func:`mrope.media.load_video` would sample) and raises
:class:`MediaDecodeError` when it cannot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image as PILImage

from mrope._errors import MediaError
from mrope.media._memory import is_pil_image
from mrope.media._source import open_source


class MediaDecodeError(MediaError):
    """A media file whose headers read but whose pixels do not decode (truncated or corrupt)."""

    code = "media_decode_failed"


def check_image_decodes(source: Any, where: str = "the image") -> None:
    """Decode every pixel of an image file (Pillow), or raise :class:`MediaDecodeError`. A PIL image is
    loaded (one opened lazily reads its file now); a numpy image is pixels already."""
    if isinstance(source, np.ndarray):
        return
    try:
        if is_pil_image(source):
            source.load()
            return
        with open_source(source) as src, PILImage.open(src.file) as im:
            im.load()
    except MediaError:
        raise
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, ... on broken data
        raise MediaDecodeError(f"{where}: its pixels do not decode ({type(exc).__name__}: {exc})") from None


def check_video_decodes(source: Any, indices: Any, where: str = "the video") -> None:
    """Decode frames ``indices`` of a video file (PyAV), or raise :class:`MediaDecodeError`."""
    from mrope.media._video_decode import decode_frames

    try:
        decode_frames(source, indices)
    except Exception as exc:  # PyAV raises its own errors on broken data; MediaError on short files
        raise MediaDecodeError(f"{where}: its frames do not decode ({type(exc).__name__}: {exc})") from None


__all__ = ["MediaDecodeError", "check_image_decodes", "check_video_decodes"]
