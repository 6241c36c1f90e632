"""detect_media_kind names what it saw when an upload is neither a readable image nor a video."""

from __future__ import annotations

import pytest
from support.media import forged_png, image_bytes, truncated

from mrope import MediaError
from mrope.media import detect_media_kind


def test_zero_sized_png_is_an_unreadable_image_not_a_video() -> None:
    # PIL refuses a 0x0 PNG header outright; FFmpeg still recognises the PNG signature
    with pytest.raises(MediaError, match=r"still image \(png_pipe\) whose header cannot be read"):
        detect_media_kind(forged_png(0, 0))


def test_cut_jpeg_is_called_a_truncated_image_not_a_video() -> None:
    with pytest.raises(MediaError, match=r"still image \(jpeg_pipe\) whose header cannot be read"):
        detect_media_kind(truncated(image_bytes(100, 100, "JPEG"), 0.3))


def test_good_image() -> None:
    assert detect_media_kind(image_bytes(10, 10, "JPEG")) == "image"
