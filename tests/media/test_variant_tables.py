"""The media variant tables: one function per value of ``frame_sampling``, ``image_bounds`` and ``video_bounds``."""

from __future__ import annotations

import dataclasses
from typing import get_args

import numpy as np
import pytest

from mrope._errors import MediaError
from mrope._rules import FrameSampling, PixelBounds, VideoPixelBounds
from mrope.media._frame_sampling import FRAME_SAMPLERS, FrameRequest, sample_video_frames
from mrope.media._image import IMAGE_RESIZERS, image_grid
from mrope.media._info import VideoInfo
from mrope.media._video import VIDEO_RESIZERS, load_video
from mrope.models import resolve_rules


def _forged(model: str, **fields: str):
    """Rules with a value the rules' own validation would refuse, to reach the tables' lookup."""
    lay = dataclasses.replace(resolve_rules(model, None))
    for name, value in fields.items():
        object.__setattr__(lay, name, value)
    return lay


def _info(num_frames: int = 300, fps: float = 30.0) -> VideoInfo:
    return VideoInfo(fps=fps, num_frames=num_frames, duration=num_frames / fps, width=640, height=480)


def test_every_rule_value_has_one_entry() -> None:
    assert set(FRAME_SAMPLERS) == set(get_args(FrameSampling))
    assert set(IMAGE_RESIZERS) == set(get_args(PixelBounds))
    assert set(VIDEO_RESIZERS) == set(get_args(VideoPixelBounds))


def test_an_unknown_frame_sampling_is_a_clear_error() -> None:
    lay = _forged("qwen2.5-vl", frame_sampling="every-other")
    req = FrameRequest(fps=None, rate=2.0, nframes=None, min_frames=4, max_frames=768)
    with pytest.raises(MediaError, match=r"unknown frame_sampling 'every-other'.*expected one of"):
        sample_video_frames(_info(), lay, req)


def test_an_unknown_image_bounds_is_a_clear_error() -> None:
    with pytest.raises(MediaError, match=r"unknown image_bounds 'corners'.*expected one of"):
        image_grid(480, 640, rules=_forged("qwen2.5-vl", image_bounds="corners"))


def test_an_unknown_video_bounds_is_a_clear_error() -> None:
    with pytest.raises(MediaError, match=r"unknown video_bounds 'area'.*expected one of"):
        load_video(_info(), rules=_forged("qwen2.5-vl", video_bounds="area"))


@pytest.mark.parametrize("model", ["qwen3-vl", "glm-4.1v", "glm-4.6v", "ernie-4.5-vl"])
def test_trim_keys_are_refused_outside_qwen_vl_utils(model: str) -> None:
    lay = resolve_rules(model, None)
    req = FrameRequest(fps=None, rate=2.0, nframes=None, min_frames=4, max_frames=768, start=1.0)
    with pytest.raises(MediaError, match="video_start / video_end are qwen-vl-utils keys"):
        sample_video_frames(_info(), lay, req)


def test_glm_nframes_is_an_even_count() -> None:
    for model in ("glm-4.1v", "glm-4.6v"):
        lay = resolve_rules(model, None)
        req = FrameRequest(
            fps=None, rate=2.0, nframes=5, min_frames=lay.min_frames, max_frames=lay.max_frames
        )
        idx = sample_video_frames(_info(), lay, req)
        assert idx.size % 2 == 0 and np.all(np.diff(idx) >= 0)
