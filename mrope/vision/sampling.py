"""Which frames of a video a Qwen processor samples, and when they are (SPEC section 6).

The rule is qwen-vl-utils' ``smart_nframes`` (``FRAME_FACTOR`` 2, default fps 2.0, 4 to 768 frames) and
its frame indices ``round(linspace(0, total - 1, n))``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope.errors import MediaError

if TYPE_CHECKING:
    from mrope.vision.video import VideoInfo

FRAME_FACTOR = 2
"""Sampled frame counts are multiples of this (the temporal patch size)."""

MAX_SAMPLED_VIDEO_FRAMES = 1 << 24
"""Longest video (in frames) whose frames can be sampled: qwen-vl-utils computes frame indices with a
float32 ``linspace``, exact only up to 2**24 (16,777,216 frames, 155 hours at 30 fps); past it the last
index rounds beyond the video's end."""


def _round_by(x: float, k: int) -> int:
    return round(x / k) * k


def _ceil_by(x: float, k: int) -> int:
    return math.ceil(x / k) * k


def _floor_by(x: float, k: int) -> int:
    return math.floor(x / k) * k


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise MediaError(f"{name} must be an int >= 1; got {value!r}")
    return int(value)


def _positive_real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise MediaError(f"{name} must be a finite number > 0; got {value!r}")
    return float(value)


def num_sampled_frames(
    num_frames: int,
    video_fps: float,
    fps: float = 2.0,
    nframes: int | None = None,
    min_frames: int = 4,
    max_frames: int = 768,
) -> int:
    """How many frames qwen-vl-utils samples (``smart_nframes``); see :func:`sample_frame_indices`."""
    total = _positive_int(num_frames, "num_frames")
    if nframes is not None:
        n = _round_by(_positive_int(nframes, "nframes"), FRAME_FACTOR)
    else:
        rate = _positive_real(video_fps, "video fps")
        want = _positive_real(fps, "sampling fps")
        lo = _ceil_by(_positive_int(min_frames, "min_frames"), FRAME_FACTOR)
        hi = _floor_by(min(_positive_int(max_frames, "max_frames"), total), FRAME_FACTOR)
        n = total / rate * want
        n = _floor_by(min(max(n, lo), hi, total), FRAME_FACTOR)
    if not (FRAME_FACTOR <= n <= total):
        raise MediaError(
            f"cannot sample {n} frames from a video of {total} frames: the sample count must lie in "
            f"[{FRAME_FACTOR}, {total}] (a multiple of {FRAME_FACTOR}"
            + (f"; nframes={nframes} was asked for)" if nframes is not None else f"; video fps {video_fps})")
        )
    return n


def sample_frame_indices(
    num_frames: int,
    video_fps: float,
    fps: float = 2.0,
    nframes: int | None = None,
    min_frames: int = 4,
    max_frames: int = 768,
) -> np.ndarray:
    """The frame indices qwen-vl-utils samples from a video.

    With ``nframes``: ``n = round(nframes / 2) * 2``. Otherwise ``n = num_frames / video_fps * fps``,
    clamped to ``[ceil2(min_frames), floor2(min(max_frames, num_frames))]`` and to ``num_frames``, then
    floored to a multiple of 2. ``n`` must lie in ``[2, num_frames]``. Indices are
    ``round(linspace(0, num_frames - 1, n))``, computed like qwen-vl-utils' ``torch.linspace`` in
    float32 (:func:`linspace_float32`, no torch needed) and round-half-to-even, so they match it bit for
    bit, also past 100k frames where float32 and float64 disagree.

    Args:
        num_frames: frames in the video.
        video_fps: the video's average frame rate, frames per second.
        fps: sampling rate, frames per second (ignored with ``nframes``).
        nframes: an exact frame count instead of a rate.
        min_frames, max_frames: bounds on the sampled count (with ``fps``).

    Returns:
        int64 ``[n]``, non-decreasing, in ``[0, num_frames)``.

    Raises:
        MediaError: ``n`` outside ``[2, num_frames]`` (``nframes`` larger than the video, a one-frame
            video), more than :data:`MAX_SAMPLED_VIDEO_FRAMES` frames, non-positive counts, a NaN,
            infinite or non-positive ``video_fps`` / ``fps``.
    """
    n = num_sampled_frames(num_frames, video_fps, fps, nframes, min_frames, max_frames)
    if num_frames > MAX_SAMPLED_VIDEO_FRAMES:
        raise MediaError(
            f"the video claims {num_frames:,} frames; at most {MAX_SAMPLED_VIDEO_FRAMES:,} can be sampled (float32 frame indices, as qwen-vl-utils computes "
            "them, are exact only below 2**24): a header claiming this many frames is most likely corrupt"
        )
    return np.round(linspace_float32(num_frames - 1, n)).astype(np.int64)


def linspace_float32(end: int, steps: int) -> np.ndarray:
    """``torch.linspace(0, end, steps, dtype=torch.float32)`` without torch, bit for bit.

    torch's CPU kernel computes ``step = float32(end / (steps - 1))`` and element ``i`` as
    ``fma(step, i, 0)`` below ``steps // 2`` and ``fma(-step, steps - 1 - i, end)`` from there on, each
    rounded once to float32. Products of a float32 and an integer below 2**24 are exact in float64, and
    so is the sum with ``end`` below 2**24, so one float64 evaluation rounded to float32 is that fused
    result (frame counts are far below 2**24).

    Returns:
        float32 ``[steps]``.
    """
    stop = np.float32(end)
    if steps == 1:
        return np.zeros(1, dtype=np.float32)
    step = np.float64(np.float32(stop / np.float32(steps - 1)))
    i = np.arange(steps, dtype=np.float64)
    half = steps // 2
    out = np.where(i < half, step * i, np.float64(stop) - step * (steps - 1 - i))
    return out.astype(np.float32)


def sample_fps(num_sampled: int, num_frames: int, video_fps: float) -> float:
    """The rate of the sampled frames, frames per second: ``num_sampled / num_frames * video_fps``."""
    return (
        _positive_int(num_sampled, "num_sampled")
        / _positive_int(num_frames, "num_frames")
        * _positive_real(video_fps, "video fps")
    )


def sampled_times(info: VideoInfo, indices: Any) -> np.ndarray:
    """Times of frames ``indices`` of a video, in seconds from its first frame.

    Variable-rate files (``info.frame_times`` set) use the frames' real timestamps; constant-rate files
    use ``index / info.fps``, as qwen-vl-utils and the Qwen3-VL processor do.

    Returns:
        float64 ``[len(indices)]``.
    """
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise MediaError(f"frame indices must be a 1-D array of ints; got {indices!r}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= info.num_frames):
        raise MediaError(
            f"frame indices must lie in [0, {info.num_frames}); got {int(idx.min())}..{int(idx.max())}"
        )
    if info.frame_times is not None:
        return np.asarray(info.frame_times, dtype=np.float64)[idx]
    return idx / float(info.fps)
