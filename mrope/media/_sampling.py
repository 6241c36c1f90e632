"""Which frames of a video a model's processor samples, and when they are.

The Qwen rule is qwen-vl-utils' ``smart_nframes`` (``qwen-vl-utils/src/qwen_vl_utils/vision_process.py``
in github.com/QwenLM/Qwen3-VL: ``FRAME_FACTOR`` 2, default fps 2.0, 4 to 768 frames) and its frame
indices ``round(linspace(0, total - 1, n))``; the others follow transformers 5.24's video processors
(their ``sample_frames``, e.g. models/qwen3_vl/video_processing_qwen3_vl.py:139), named at each function.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np

from mrope._errors import MediaError
from mrope.media._info import VideoInfo

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


def _check_not_a_still(total: int, frames_per_patch: int = FRAME_FACTOR) -> None:
    """A video shorter than one temporal patch (a one-frame video, patches of 2) cannot be sampled: say so
    plainly (not as a sample-count range)."""
    if total < frames_per_patch:
        raise MediaError(
            f"this is a one-frame video: a temporal patch takes {frames_per_patch} frames, so it cannot be "
            "sampled as a video; give its frame as an image instead"
        )


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
    _check_not_a_still(total)
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


def frame_range(
    num_frames: int, video_fps: float, video_start: float | None, video_end: float | None
) -> tuple[int, int]:
    """The first and last frame (inclusive) of a video trimmed to ``video_start .. video_end`` seconds,
    as qwen-vl-utils' ``calculate_video_frame_range`` (vision_process.py) computes them: times clamped to
    ``[0, num_frames / video_fps]``, ``first = ceil(start * fps)``, ``last = min(floor(end * fps),
    num_frames - 1)``; ``None`` keeps that end of the video.

    Raises:
        MediaError: a range that holds fewer than two frames (``first >= last``).
    """
    total = _positive_int(num_frames, "num_frames")
    rate = _positive_real(video_fps, "video fps")
    duration = total / rate
    first = 0 if video_start is None else math.ceil(max(0.0, min(float(video_start), duration)) * rate)
    last = (
        total - 1
        if video_end is None
        else min(math.floor(max(0.0, min(float(video_end), duration)) * rate), total - 1)
    )
    if first >= last:
        raise MediaError(
            f"video_start={video_start!r} .. video_end={video_end!r} s holds frames {first}..{last} of a "
            f"{duration:.3f} s video: a trimmed video needs at least two frames"
        )
    return first, last


def trimmed_frame_indices(
    num_frames: int,
    video_fps: float,
    video_start: float | None,
    video_end: float | None,
    fps: float = 2.0,
    nframes: int | None = None,
    min_frames: int = 4,
    max_frames: int = 768,
) -> np.ndarray:
    """The frame indices qwen-vl-utils samples from a video trimmed to ``video_start .. video_end``
    (its decord / torchcodec readers): :func:`frame_range`, then ``smart_nframes`` over the trimmed
    frames and ``round(linspace(first, last, n))`` (float32, as torch computes it).

    Returns:
        int64 ``[n]`` in ``[first, last]``.
    """
    first, last = frame_range(num_frames, video_fps, video_start, video_end)
    n = num_sampled_frames(last - first + 1, video_fps, fps, nframes, min_frames, max_frames)
    return np.round(linspace_float32(last, n, first)).astype(np.int64)


def linspace_float32(end: int, steps: int, start: int = 0) -> np.ndarray:
    """``torch.linspace(start, end, steps, dtype=torch.float32)`` without torch, bit for bit.

    torch's CPU kernel computes ``step = float32(end / (steps - 1))`` and element ``i`` as
    ``fma(step, i, 0)`` below ``steps // 2`` and ``fma(-step, steps - 1 - i, end)`` from there on, each
    rounded once to float32. Products of a float32 and an integer below 2**24 are exact in float64, and
    so is the sum with ``end`` below 2**24, so one float64 evaluation rounded to float32 is that fused
    result (frame counts are far below 2**24).

    Returns:
        float32 ``[steps]``.
    """
    stop, first = np.float32(end), np.float32(start)
    if steps == 1:
        return np.full(1, first, dtype=np.float32)
    step = np.float64(np.float32((stop - first) / np.float32(steps - 1)))
    i = np.arange(steps, dtype=np.float64)
    half = steps // 2
    out = np.where(i < half, np.float64(first) + step * i, np.float64(stop) - step * (steps - 1 - i))
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


MAX_SAMPLING_STEPS = 10_000_000
"""Most sampling steps :func:`glm4v_frame_indices` takes (a rate far above the video's is refused)."""


def qwen3_vl_frame_indices(
    num_frames: int,
    video_fps: float,
    fps: float = 2.0,
    nframes: int | None = None,
    min_frames: int = 4,
    max_frames: int = 768,
    *,
    temporal_patch_size: int = FRAME_FACTOR,
) -> np.ndarray:
    """The frame indices transformers' Qwen3-VL video processor samples (``sample_frames``); HY-V4-VL's
    ``sample_frames`` is the same rule.

    ``n = int(num_frames / video_fps * fps)`` clamped to ``[min_frames, max_frames]`` and to
    ``num_frames`` (``nframes``, when given, is used as is); indices ``round(linspace(0, num_frames - 1,
    n))`` in float64 (numpy's round: halves to even). The count is not rounded to a multiple of 2: the
    processor pads the last temporal patch by repeating the last frame.

    ``temporal_patch_size``: the fewest frames a clip may have (one temporal patch; Qwen3-VL's
    ``smart_resize`` refuses fewer than 2). With 1 (HY-V4-VL) a one-frame video is a clip of one frame.
    With ``nframes`` a one-frame video is sampled too, as the processor samples it: ``nframes`` copies
    of frame 0.

    Returns:
        int64 ``[n]``, non-decreasing.

    Raises:
        MediaError: fewer than ``temporal_patch_size`` frames to sample, more than
            :data:`MAX_SAMPLED_VIDEO_FRAMES`, bad counts or rates.
    """
    total = _positive_int(num_frames, "num_frames")
    least = _positive_int(temporal_patch_size, "temporal_patch_size")
    if nframes is not None:  # the processor takes a count as is: a one-frame video gives it repeats
        n = _positive_int(nframes, "nframes")
        if n > MAX_SAMPLED_VIDEO_FRAMES:
            raise MediaError(f"nframes must be at most {MAX_SAMPLED_VIDEO_FRAMES:,}; got {n:,}")
    else:
        _check_not_a_still(total, min(least, FRAME_FACTOR))
        rate = _positive_real(video_fps, "video fps")
        want = _positive_real(fps, "sampling fps")
        lo, hi = _positive_int(min_frames, "min_frames"), _positive_int(max_frames, "max_frames")
        n = min(max(int(total / rate * want), lo), hi, total)
    if n < least:
        raise MediaError(
            f"cannot sample {n} frame(s) from a video of {total} frames: one temporal patch needs "
            f"{least} frames"
        )
    return np.linspace(0, total - 1, n).round().astype(np.int64)


def glm4v_frame_indices(
    num_frames: int,
    video_fps: float,
    fps: float = 2.0,
    max_duration: float = 300.0,
    duration: float | None = None,
) -> np.ndarray:
    """The frame indices transformers' GLM-4.1V video processor samples (``sample_frames``).

    With ``duration`` (seconds; default ``num_frames / video_fps``, what transformers' PyAV reader
    reports) up to ``max_duration``: frame ``min(last, ceil(i * video_fps / fps))`` for
    ``i < max(floor(duration * fps), 1)``. Longer clips: ``int(max_duration * fps)`` frames, every frame
    if the video has no more than that, else ``min(last, ceil(t * video_fps))`` for ``t`` in
    ``linspace(0, duration, int(max_duration * fps))``. Repeats are dropped (first occurrence kept) and
    an odd count gets its last index once more.

    Returns:
        int64 ``[n]``, ``n`` even, non-decreasing.

    Raises:
        MediaError: bad counts or rates, or a sampling rate so far above the video's that more than
            :data:`MAX_SAMPLING_STEPS` steps would be needed.
    """
    total = _positive_int(num_frames, "num_frames")
    rate = _positive_real(video_fps, "video fps")
    want = _positive_real(fps, "sampling fps")
    limit = _positive_real(max_duration, "max_duration")
    last = total - 1
    clip = _positive_real(duration, "duration") if duration is not None else total / rate
    if clip <= limit:
        n = max(int(math.floor(clip * want)), 1)
        # indices stop changing once they reach the last frame: later steps would only repeat it
        steps = min(n, int(math.floor(last * want / rate)) + 2)
        if steps > MAX_SAMPLING_STEPS:
            raise MediaError(
                f"sampling {want:g} fps from a {rate:g} fps video of {total} frames needs {steps:,} steps; "
                f"at most {MAX_SAMPLING_STEPS:,}"
            )
        raw = [min(last, math.ceil(i * rate / want)) for i in range(steps)]
    else:
        count = int(limit * want)
        if count >= total:
            raw = list(range(total))
        else:
            raw = [
                min(last, math.ceil(t * rate)) for t in np.linspace(0, clip, count, endpoint=True).tolist()
            ]
    if not raw:
        raise MediaError(f"max_duration {limit:g} s at {want:g} fps samples no frame")
    return _distinct_padded_even(raw)


def _distinct_padded_even(indices: list[int]) -> np.ndarray:
    """int64 ``[n]``: ``indices`` with repeats dropped (first occurrence kept, order kept), then the last one
    repeated once if the count is odd, as the GLM-4.1V and GLM-4.6V video processors do before patching."""
    seen: set[int] = set()
    out: list[int] = []
    for k in indices:
        if k not in seen:
            seen.add(k)
            out.append(k)
    if len(out) % 2:
        out.append(out[-1])
    return np.asarray(out, dtype=np.int64)


GLM46V_MAX_FRAMES = 640
"""Most frames GLM-4.6V's video processor samples."""


def glm46v_frame_indices(
    num_frames: int,
    video_fps: float,
    temporal_patch_size: int = 2,
    duration: float | None = None,
) -> np.ndarray:
    """The frame indices transformers' GLM-4.6V video processor samples (dynamic fps).

    The target rate follows the clip's duration ``d`` (seconds; default ``num_frames / video_fps``, what
    transformers' PyAV reader reports; capped at 2400 s for the rate and the count): 3 fps up to 30 s,
    1 fps up to 300 s, 0.5 fps beyond. It wants ``n = min(int(d * rate * temporal_patch_size), 640)``
    frames. Walking the frames in order, a frame is taken when its time ``i / video_fps`` reaches the
    next target time (targets ``k / (temporal_patch_size * rate)``, accumulated in floating point, below
    ``int(d)`` s). More than ``n`` taken, or a video of fewer than ``n`` frames:
    ``linspace(0, last, n)`` truncated; fewer: ``linspace(first taken, last taken, n)`` truncated. Repeats are
    dropped and an odd count gets its last index once more.

    Returns:
        int64 ``[m]``, ``m`` even, non-decreasing.

    Raises:
        MediaError: bad counts or rates.
    """
    total = _positive_int(num_frames, "num_frames")
    rate = _positive_real(video_fps, "video fps")
    tps = _positive_int(temporal_patch_size, "temporal_patch_size")
    clip = _positive_real(duration, "duration") if duration is not None else total / rate
    effective = min(clip, 2400.0)
    target = 3.0 if effective <= 30 else 1.0 if effective <= 300 else 0.5
    want = min(int(effective * target * tps), GLM46V_MAX_FRAMES)
    if want < 1:
        raise MediaError(f"a {clip:g} s video samples no frame at {target:g} fps")
    last = total - 1
    if total < want:
        raw = np.linspace(0, last, want, dtype=int).tolist()
    else:
        taken: list[int] = []
        step = 1 / (tps * target)
        frame_time = 1 / rate
        max_second = int(clip)
        current = 0.0
        i = 0
        # every take moves to a later frame; past ``want`` takes the result is linspace anyway
        while i < total and len(taken) <= want:
            # the first frame at or after the current target time, as the processor's scan finds it
            j = max(i, math.ceil(current * rate) - 1)
            while j < total and j * frame_time < current:
                j += 1
            if j >= total:
                break
            taken.append(j)
            current += step
            i = j + 1
            if current >= max_second:
                break
        if len(taken) < want:
            start, end = (taken[0], taken[-1]) if taken else (0, last)
            raw = np.linspace(start, end, want, dtype=int).tolist()
        elif len(taken) > want:
            raw = np.linspace(0, last, want, dtype=int).tolist()
        else:
            raw = taken
    return _distinct_padded_even(raw)


_TORCH_FLOAT_LANES = 8
"""Lanes of torch's CPU ``Vectorized<float>`` that its ``arange`` kernel fills per vector (AVX2 and
AVX-512 builds alike, measured against torch 2.13)."""

_TORCH_GRAIN = 32768
"""torch's ``at::internal::GRAIN_SIZE``: longer ranges are split across threads, each split realigning
the vectors (so :func:`torch_arange_float32` is exact below this many elements)."""


def torch_arange_float32(end: int, step: float) -> np.ndarray:
    """``torch.arange(0, end, step)`` (float32, on the CPU) without torch, bit for bit below
    :data:`_TORCH_GRAIN` elements.

    torch makes ``ceil(end / step)`` elements. Its kernel fills vectors of 8 lanes two at a time: a vector
    starting at element ``b`` holds ``float32(float32(b * step) + k * step)`` for lane ``k`` (the sum in
    float64); the elements left over after the last pair are ``float32(i * step)``.

    Returns:
        float32 ``[ceil(end / step)]``.
    """
    length = math.ceil(end / step)
    out = np.empty(length, dtype=np.float32)
    lanes = np.arange(_TORCH_FLOAT_LANES, dtype=np.float64) * step
    i = 0
    while i + 2 * _TORCH_FLOAT_LANES <= length:
        for begin in (i, i + _TORCH_FLOAT_LANES):
            base = float(np.float32(step * begin))
            out[begin : begin + _TORCH_FLOAT_LANES] = (base + lanes).astype(np.float32)
        i += 2 * _TORCH_FLOAT_LANES
    out[i:] = (np.arange(i, length, dtype=np.float64) * step).astype(np.float32)
    return out


def ernie_frame_indices(
    num_frames: int,
    video_fps: float,
    fps: float | None = None,
    nframes: int | None = None,
    min_frames: int = 16,
    max_frames: int = 180,
) -> np.ndarray:
    """The frame indices transformers' ERNIE-4.5-VL video processor samples (``sample_frames``, then the
    repeat of the last frame that ``_prepare_input_videos`` adds to an odd count).

    Without ``fps`` (the class default: no rate) ``n`` is the frame count; with it ``n = num_frames /
    video_fps * fps``; either is clamped to ``[min_frames, max_frames]`` and to the frame count (not
    rounded: a fraction stays). ``nframes`` is used as is and must lie in ``[min_frames, max_frames]``.
    Indices are ``torch.arange(0, num_frames, num_frames / n).int()`` (:func:`torch_arange_float32`,
    truncated); an odd count gets its last index once more.

    Returns:
        int64 ``[m]``, ``m`` even, non-decreasing.

    Raises:
        MediaError: ``nframes`` outside ``[min_frames, max_frames]`` or above the frame count, more than
            :data:`_TORCH_GRAIN` frames, bad counts or rates.
    """
    total = _positive_int(num_frames, "num_frames")
    lo, hi = _positive_int(min_frames, "min_frames"), _positive_int(max_frames, "max_frames")
    if nframes is not None:
        n: float = _positive_int(nframes, "nframes")
        if not lo <= n <= hi:
            raise MediaError(f"nframes must lie in [{lo}, {hi}] (min_frames, max_frames); got {nframes}")
        if n > total:
            raise MediaError(f"cannot sample {nframes} frames from a video of {total} frames")
    else:
        want = (
            total
            if fps is None
            else total / _positive_real(video_fps, "video fps") * _positive_real(fps, "fps")
        )
        n = min(max(want, lo), hi, total)
    if n >= _TORCH_GRAIN:
        raise MediaError(f"at most {_TORCH_GRAIN - 1:,} frames can be sampled by this rule; got {n:g}")
    idx = torch_arange_float32(total, total / n).astype(np.int64)
    if idx.size % 2:
        idx = np.append(idx, idx[-1])
    return idx


def qwen2_vl_frame_indices(
    num_frames: int,
    video_fps: float,
    fps: float | None = None,
    nframes: int | None = None,
    min_frames: int = 4,
    max_frames: int = 768,
    temporal_patch_size: int = 2,
    clamp_tail: bool = False,
) -> np.ndarray:
    """The frame indices transformers 5.24's Qwen2-VL video processor keeps (Qwen2-VL, Qwen2.5-VL and
    the omni families' video processor, models/qwen2_vl/video_processing_qwen2_vl.py).

    Its class sets ``do_sample_frames = False`` (:130) and the released checkpoints' processor files do not
    turn it on, so without ``fps`` and ``nframes`` every frame is kept: ``0 .. num_frames - 1`` (an odd
    count is padded with its last frame when the frames are cut into temporal patches, ``patchify``
    :286). With either (a call that asks to sample, as ``do_sample_frames=True`` with ``fps`` or
    ``num_frames`` does there), its ``sample_frames`` (:170-235): ``nframes`` gives ``n = round(nframes
    / tps) * tps``; ``fps`` gives ``n = num_frames / video_fps * fps`` clamped to ``[min_frames,
    floor_tps(min(max_frames, num_frames))]`` and to ``num_frames``, floored to a multiple of ``tps``;
    the indices are ``torch.arange(0, num_frames, num_frames / n).int()`` (:233,
    :func:`torch_arange_float32`, truncated).

    Returns:
        int64 ``[n]``, increasing, in ``[0, num_frames)``.

    Raises:
        MediaError: ``fps`` with ``nframes``; a sample count of 0 or above the frame count; a count whose
            ``arange`` overshoots to index ``num_frames`` (300 frames, 14 samples: transformers indexes
            a frame past the end); more than
            :data:`MAX_SAMPLED_VIDEO_FRAMES` frames kept, or :data:`_TORCH_GRAIN` sampled; bad counts or rates.
    """
    total = _positive_int(num_frames, "num_frames")
    tps = _positive_int(temporal_patch_size, "temporal_patch_size")
    if fps is not None and nframes is not None:
        raise MediaError(f"pass fps or nframes, not both; got fps={fps!r}, nframes={nframes!r}")
    if fps is None and nframes is None:
        if total > MAX_SAMPLED_VIDEO_FRAMES:
            raise MediaError(
                f"the video claims {total:,} frames; at most {MAX_SAMPLED_VIDEO_FRAMES:,} are kept (a header "
                "claiming this many frames is most likely corrupt)"
            )
        return np.arange(total, dtype=np.int64)
    if nframes is not None:
        n = _round_by(_positive_int(nframes, "nframes"), tps)
    else:
        lo, hi = _positive_int(min_frames, "min_frames"), _positive_int(max_frames, "max_frames")
        want = total / _positive_real(video_fps, "video fps") * _positive_real(fps, "fps")
        n = _floor_by(min(max(want, lo), _floor_by(min(hi, total), tps), total), tps)
    if not 1 <= n <= total:
        raise MediaError(
            f"cannot sample {n} frames from a video of {total} frames: transformers' Qwen2-VL video "
            f"processor samples a multiple of {tps} frames, at least {tps} and at most the frame count"
        )
    if n >= _TORCH_GRAIN:
        raise MediaError(f"at most {_TORCH_GRAIN - 1:,} frames can be sampled by this rule; got {n:g}")
    idx = torch_arange_float32(total, total / n).astype(np.int64)
    if clamp_tail:
        return np.minimum(idx, total - 1)
    if idx[-1] >= total:  # e.g. 300 frames, n 14: 300 / (300 / 14) > 14, so 15 values, the last 300
        raise MediaError(
            f"transformers' Qwen2-VL sample_frames picks frame {idx[-1]} of a {total}-frame video here: "
            f"torch.arange(0, {total}, {total} / {n}) overshoots by float rounding to a frame that does not "
            "exist; pass another fps or nframes"
        )
    return idx
