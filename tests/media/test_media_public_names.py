"""``mrope.media``'s public names: what a user calls, pinned, so a change to the surface is a visible diff."""

from __future__ import annotations

import types

import mrope.media

PUBLIC = [
    "AlignedCrop",
    "AudioInfo",
    "FrameSize",
    "MediaKind",
    "Reader",
    "TilePlan",
    "VideoInfo",
    "crop_segment",
    "decode_frames",
    "detect_media_kind",
    "image_grid",
    "image_size",
    "load_audio",
    "load_frames",
    "load_image",
    "load_video",
    "open_url",
    "probe_audio",
    "probe_video",
    "smart_resize",
]


def test_all_is_pinned() -> None:
    assert sorted(mrope.media.__all__) == PUBLIC


def test_the_package_holds_no_other_public_name() -> None:
    names = {
        name
        for name, value in vars(mrope.media).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert names == set(PUBLIC)
