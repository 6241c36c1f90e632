"""Read a video: metadata (:func:`probe_video`), frames (:func:`decode_frames`), sizing (:func:`load_video`).

Position ids need only the sampled frames' count, size and times, so :func:`load_video` works from
metadata alone: an hour-long file costs a header read, never a decode.

Timing. A constant-rate file is timed by ``index / fps`` from its header. When the header lacks the
frame count or the duration, or its average rate disagrees with its base rate (a variable-rate hint),
:func:`probe_video` demuxes the packets (no decode, at most ``max_packets``) and reads their timestamps:
the frame count is the packet count, and if the intervals between sorted timestamps vary (any interval
more than 25 % off the median) the file is variable-rate and ``frame_times`` holds every frame's time.

Rotation. Phones record portrait video as landscape coded frames plus a display rotation (the MP4 / MOV
``tkhd`` matrix, the Matroska projection). :class:`VideoInfo` reports both: ``width`` / ``height`` are
the display size (after the rotation), ``rotation`` the rotation and ``coded_size`` the coded frames'
size. Which of the two a model is given depends on the loader that decodes the file, not on the model
(transformers 5.24, PyAV 18; ``tests/media/test_vision_rotation.py`` runs the PyAV readers): torchcodec,
which transformers' video processors use for a video path or URL (``fetch_videos``), rotates (display
size); transformers' own ``load_video`` (default backend ``"pyav"``), PyAV and torchvision do not
(coded size); decord 0.6.0 fails on 90 / 270 MP4 / MOV files. :mod:`mrope.media.readers` has each
loader's frame count, rate and orientation. So :func:`load_video` and :func:`decode_frames` take
``frame_size``: ``"display"`` (the default: the released processors' own path) or ``"coded"`` (frames
decoded by PyAV, transformers' ``load_video`` or torchvision, then handed to the processor as arrays),
and :func:`load_video` takes ``reader=`` to follow one loader entirely. For 90 / 270 the two grids have
h and w swapped, and every h / w position of the video differs.

Safety. Files reach FFmpeg only through :func:`mrope.media.container.open_container`, as a byte stream
that may open no other resource. Every failure is a :class:`~mrope.MediaError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, Literal

import av
import numpy as np

from mrope.audio_grid import require_audio
from mrope.errors import MediaError
from mrope.media.audio import audio_from_info, has_audio_stream, probe_audio
from mrope.media.container import open_container, video_stream
from mrope.media.info import FrameSize, VideoInfo, check_frame_size
from mrope.media.packets import scan_packets
from mrope.media.readers import Reader, check_reader, reader_info
from mrope.media.resize import smart_resize, smart_resize_clip, smart_resize_tokens, video_max_pixels
from mrope.media.rotation import iso_rotations, matroska_rotation, normalise_rotation
from mrope.media.sampling import (
    ernie_frame_indices,
    glm4v_frame_indices,
    glm46v_frame_indices,
    qwen3_vl_frame_indices,
    sample_fps,
    sample_frame_indices,
    sampled_times,
    trimmed_frame_indices,
)
from mrope.media.source import OpenSource, open_source
from mrope.models import ModelLike, resolve_rules
from mrope.rules import LayoutRules
from mrope.segments import Video

DEFAULT_MAX_PACKETS = 500_000
"""Most packets :func:`probe_video` demuxes when it must count or time frames (about 4.6 hours at
30 fps); it bounds the work a hostile file can cause."""

VFR_TOLERANCE = 0.25
"""A file whose frame intervals differ from their median by more than this fraction is variable-rate."""

_NO_INDEX_SEEK_GAP_S = 4.0
"""Without a keyframe index, :func:`decode_frames` seeks only across gaps longer than this (seconds)."""

_AVFMT_NOTIMESTAMPS = 0x0080
"""Demuxer flag: the format stores no timestamps (raw elementary streams); the parser makes them up."""


def _synthetic_timestamps(container: av.container.InputContainer) -> bool:
    return bool(container.format.flags & _AVFMT_NOTIMESTAMPS)


DecodeMode = Literal["auto", "seek", "sequential"]


def _rate(value: Fraction | None) -> float | None:
    if value is None or value.denominator == 0:
        return None
    x = float(value)
    return x if math.isfinite(x) and x > 0 else None


def _header_rotations(src: OpenSource) -> tuple[dict[int, int], int | None]:
    """Rotations from the container headers, read before FFmpeg opens the file (it shares the file
    object, so nothing may move its position afterwards)."""
    try:
        iso = iso_rotations(src.file, src.size)
        mkv = None if iso else matroska_rotation(src.file, src.size)
    except Exception:  # an unreadable header tree only loses the rotation
        iso, mkv = {}, None
    finally:
        src.file.seek(0)
    return iso, mkv


def _probe_video_source(src: OpenSource, max_packets: int, deadline: float | None = None) -> VideoInfo:
    if isinstance(max_packets, bool) or not isinstance(max_packets, int) or max_packets < 1:
        raise MediaError(f"max_packets must be an int >= 1; got {max_packets!r}")
    iso, mkv = _header_rotations(src)
    container = open_container(src)
    try:
        stream = video_stream(container, src.name)
        cc = stream.codec_context
        coded_w, coded_h = int(cc.width or 0), int(cc.height or 0)
        if coded_w <= 0 or coded_h <= 0:
            raise MediaError(f"{src.name}: the video stream has no frame size ({coded_w}x{coded_h})")
        tb = stream.time_base
        tbf = float(tb) if tb else None
        frames = int(stream.frames or 0)
        if frames > src.size:
            raise MediaError(
                f"{src.name}: its header claims {frames:,} frames, but the whole file holds {src.size:,} bytes "
                "and every frame takes at least one: the header is corrupt or forged"
            )
        duration: float | None = None
        if stream.duration and tbf:
            duration = stream.duration * tbf
        elif container.duration:
            duration = container.duration / av.time_base
        if duration is not None and not (math.isfinite(duration) and duration > 0):
            duration = None
        avg, base, guess = _rate(stream.average_rate), _rate(stream.base_rate), _rate(stream.guessed_rate)
        start = stream.start_time * tbf if stream.start_time is not None and tbf else 0.0
        common = dict(codec=cc.name, container=container.format.name)
        rotation = iso.get(int(stream.id), 0) if iso else (mkv or 0)
        width, height = (coded_h, coded_w) if rotation in (90, 270) else (coded_w, coded_h)
        header_ok = frames > 0 and duration is not None and avg is not None
        suspect_vfr = avg is not None and base is not None and abs(avg - base) > 1e-3 * base
        if header_ok and not suspect_vfr:
            return VideoInfo(
                avg, frames, duration, width, height, rotation, None, start, timing="header", **common
            )
        scan = scan_packets(container, stream, max_packets, src.name, deadline)
        if scan.truncated:
            if header_ok:
                return VideoInfo(
                    avg, frames, duration, width, height, rotation, None, start, timing="header", **common
                )
            raise MediaError(
                f"{src.name}: the header has no frame count and the stream has more than {max_packets} "
                "packets; pass a larger max_packets to count them"
            )
        if scan.count == 0:
            raise MediaError(f"{src.name}: the video stream holds no frames")
        n = scan.count
        if scan.times is None or not tbf or _synthetic_timestamps(container):
            # no timestamps (e.g. a raw H.264 stream): constant rate as the codec declares it (the SPS
            # timing info), else FFmpeg's guess
            rate = _rate(cc.framerate) or guess or avg or base
            if rate is None:
                raise MediaError(f"{src.name}: the video stream has neither timestamps nor a frame rate")
            return VideoInfo(
                rate, n, n / rate, width, height, rotation, None, 0.0, timing="packets", **common
            )
        rel = (scan.times - scan.times[0]) * tbf
        steps = np.diff(rel)
        median = float(np.median(steps)) if steps.size else 0.0
        start = float(scan.times[0]) * tbf
        if median <= 0:
            rate = avg or guess or base
            if rate is None:
                raise MediaError(
                    f"{src.name}: the video stream's timestamps do not advance and it has no frame rate"
                )
            return VideoInfo(
                rate, n, n / rate, width, height, rotation, None, start, timing="packets", **common
            )
        span = float(rel[-1]) + median
        variable = n >= 3 and float(np.max(np.abs(steps - median))) > VFR_TOLERANCE * median
        if variable:
            times = tuple(float(t) for t in rel)
            return VideoInfo(
                n / span, n, span, width, height, rotation, times, start, timing="packets", **common
            )
        measured = (n - 1) / float(rel[-1]) if n > 1 else 1.0 / median
        rate = avg if avg is not None and abs(avg - measured) <= 0.01 * measured else measured
        return VideoInfo(rate, n, n / rate, width, height, rotation, None, start, timing="packets", **common)
    finally:
        container.close()


def probe_video(
    source: Any, *, max_packets: int = DEFAULT_MAX_PACKETS, deadline: float | None = None
) -> VideoInfo:
    """Read a video's frame count, rate, duration, display size and rotation without decoding.

    Container and stream headers come first; packets are demuxed (never decoded) only when the header
    lacks the frame count or duration, or hints at a variable rate (see the module docstring).

    Args:
        source: a path, bytes, or a binary file-like object.
        max_packets: most packets demuxed. Past it a file whose header has the frame count and duration
            keeps the header's values (timed as constant-rate); one without them is an error.
        deadline: a ``time.monotonic()`` value; packet counting stops with
            :class:`ProbeDeadlineError` once it is past (checked every
            :data:`~mrope.media.packets.DEADLINE_EVERY` packets), so a caller that
            gave up on a file does not leave the work running.

    Raises:
        MediaError: unreadable or corrupt data, no video stream (an audio-only file), a still image,
            no frame size, no frames, or no usable frame rate.
    """
    with open_source(source) as src:
        return _probe_video_source(src, max_packets, deadline)


# ----------------------------------------------------------------------------------------- decoding


class _NoTimestamps(Exception):
    """A decoded frame without a pts: fall back to counting frames from the start."""


class _NoSeek(Exception):
    """The stream cannot seek: decode it sequentially."""


def _to_rgb(frame: av.VideoFrame, size: tuple[int, int] | None, upright: bool) -> np.ndarray:
    """``frame`` as uint8 RGB ``[H, W, 3]`` (scaled to ``size`` = (width, height) if given and different),
    rotated upright by its display rotation when ``upright``."""
    if size is not None and (frame.width, frame.height) != size:
        arr = frame.to_ndarray(format="rgb24", width=size[0], height=size[1])
    else:
        arr = frame.to_ndarray(format="rgb24")
    k = normalise_rotation(frame.rotation) // 90 if upright else 0
    return np.rot90(arr, k) if k else arr


class _Cursor:
    """A decode position with one frame of look-ahead."""

    def __init__(self, container: av.container.InputContainer, stream: Any) -> None:
        self.container, self.stream = container, stream
        self.tb = float(stream.time_base)
        self.it: Iterator[av.VideoFrame] | None = None
        self.head: av.VideoFrame | None = None
        self.done = False
        self.last = -math.inf  # time of the last frame consumed (seconds)

    def restart(self, seek_seconds: float | None) -> None:
        if seek_seconds is not None:
            self.container.seek(int(math.floor(seek_seconds / self.tb)), stream=self.stream, backward=True)
        self.it = self.container.decode(self.stream)
        self.head, self.done, self.last = None, False, -math.inf

    def peek(self) -> av.VideoFrame | None:
        if self.head is None and not self.done:
            assert self.it is not None
            self.head = next(self.it, None)
            if self.head is None:
                self.done = True
            elif self.head.pts is None:
                raise _NoTimestamps
        return self.head

    def time(self, frame: av.VideoFrame) -> float:
        return frame.pts * self.tb

    def pop(self) -> None:
        if self.head is not None:
            self.last = self.time(self.head)
        self.head = None


def _windows(info: VideoInfo, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Absolute target time of each frame and the half-way points to its neighbours (seconds)."""
    if info.frame_times is not None:
        all_t = np.asarray(info.frame_times, dtype=np.float64)
        t = all_t[idx]
        prev = np.where(idx > 0, all_t[np.maximum(idx - 1, 0)], -np.inf)
        nxt = np.where(idx < info.num_frames - 1, all_t[np.minimum(idx + 1, info.num_frames - 1)], np.inf)
    else:
        step = 1.0 / info.fps
        t = idx * step
        prev = np.where(idx > 0, t - step, -np.inf)
        nxt = t + step
    lo, hi = (t + prev) / 2, (t + nxt) / 2
    return t + info.start_time, lo + info.start_time, hi + info.start_time


def _keyframe_before(stream: Any, seconds: float, tb: float) -> float | None:
    entries = stream.index_entries
    if entries is None or len(entries) == 0:
        return None
    i = entries.search_timestamp(int(math.floor(seconds / tb)), backward=True)
    if i < 0:
        return None
    return entries[i].timestamp * tb


def _worth_seeking(stream: Any, cur: _Cursor, t: float, start: float) -> bool:
    """Seek when a keyframe lies between the decode position and the target (decoding up to it would be
    wasted); without a keyframe index, when the target is more than a few seconds ahead."""
    here = max(cur.last, start) if cur.it is not None else start
    kf = _keyframe_before(stream, t, cur.tb)
    if kf is not None:
        return kf > here + 1e-9
    return t - here > _NO_INDEX_SEEK_GAP_S


def _decode_by_time(
    src: OpenSource, info: VideoInfo, idx: np.ndarray, mode: DecodeMode, upright: bool
) -> list[np.ndarray]:
    """Decode frames ``idx`` (sorted, unique), identified by their presentation timestamps."""
    targets, lows, highs = _windows(info, idx)
    container = open_container(src)
    try:
        stream = video_stream(container, src.name)
        if _synthetic_timestamps(container):
            raise _NoTimestamps  # a raw stream: frames are counted, not timed
        stream.thread_type = "AUTO"
        cur = _Cursor(container, stream)
        out: list[np.ndarray] = []
        size: tuple[int, int] | None = None
        for k, (t, lo, hi) in enumerate(zip(targets, lows, highs, strict=True)):
            if mode == "auto":
                seek = _worth_seeking(stream, cur, t, info.start_time)
            else:
                seek = mode == "seek"
            if seek:
                try:
                    _seek_to(cur, t, hi)
                except (av.error.FFmpegError, OSError):
                    raise _NoSeek from None
            elif cur.it is None:
                cur.restart(None)
            while True:
                frame = cur.peek()
                if frame is None:
                    raise MediaError(
                        f"{src.name}: the video ended before frame {int(idx[k])} (t = {t - info.start_time:.3f} s); "
                        f"its header promised {info.num_frames} frames"
                    )
                if cur.time(frame) >= lo:
                    break
                cur.pop()
            arr = _to_rgb(frame, size, upright)
            if size is None:
                size = (frame.width, frame.height)
            out.append(arr)
            cur.pop()
        return out
    except (MediaError, _NoTimestamps, _NoSeek):
        raise
    except Exception as exc:
        raise MediaError(f"{src.name}: decoding failed ({type(exc).__name__}: {exc})") from None
    finally:
        container.close()


def _seek_to(cur: _Cursor, t: float, hi: float) -> None:
    """Seek so that the first decoded frame is at or before ``t`` (its window ends at ``hi``)."""
    back = 0.0
    for _ in range(6):
        cur.restart(max(t - back, 0.0) if back else t)
        first = cur.peek()
        if first is not None and cur.time(first) < hi:
            return
        back = back * 2 if back else 1.0  # landed past the target (a leading frame): seek earlier
    cur.restart(0.0)


def _decode_by_count(src: OpenSource, idx: np.ndarray, upright: bool) -> list[np.ndarray]:
    """Decode frames ``idx`` (sorted, unique) by counting decoded frames from the start."""
    container = open_container(src)
    try:
        stream = video_stream(container, src.name)
        stream.thread_type = "AUTO"
        out: list[np.ndarray] = []
        size: tuple[int, int] | None = None
        want = iter(idx.tolist())
        nxt = next(want, None)
        for count, frame in enumerate(container.decode(stream)):
            if nxt is None:
                break
            if count == nxt:
                out.append(_to_rgb(frame, size, upright))
                size = size or (frame.width, frame.height)
                nxt = next(want, None)
        if nxt is not None:
            raise MediaError(f"{src.name}: the video ended before frame {nxt}")
        return out
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(f"{src.name}: decoding failed ({type(exc).__name__}: {exc})") from None
    finally:
        container.close()


def decode_frames(
    source: Any,
    indices: Any,
    *,
    info: VideoInfo | None = None,
    mode: DecodeMode = "auto",
    frame_size: FrameSize = "display",
) -> np.ndarray:
    """Decode frames ``indices`` of a video to RGB.

    Frames are identified by their presentation timestamps (frame ``k`` is the frame nearest
    ``k / fps``, or ``frame_times[k]`` for a variable-rate file). ``mode="auto"`` decodes forward while
    the next wanted frame is close and seeks to the keyframe before it when a keyframe lies between
    (from the container's index; without one, across gaps over 4 s); ``"seek"`` seeks before every
    frame and ``"sequential"`` never seeks (both give the same frames; they exist to test and measure
    the auto mode). Decoding is threaded (``thread_type = "AUTO"``). Streams without timestamps (raw
    H.264) are decoded from the start, counting frames. With ``frame_size="display"`` the display
    rotation of each frame is applied (``np.rot90``), so the output is upright (as torchcodec returns
    it); with ``"coded"`` frames are returned as stored, as transformers' ``load_video`` (backend
    ``"pyav"``) returns them.

    Args:
        source: a path, bytes, or a binary file-like object.
        indices: frame indices, any order, repeats allowed, each in ``[0, num_frames)``.
        info: the file's :class:`VideoInfo` if already probed.
        mode: ``"auto"``, ``"seek"`` or ``"sequential"``.
        frame_size: ``"display"`` (upright) or ``"coded"`` (as stored); see the module docstring.

    Returns:
        uint8 ``[n, H, W, 3]`` in the order of ``indices``; ``(H, W) = info.size(frame_size)``.

    Raises:
        MediaError: bad indices, unreadable data, or a file that ends before a wanted frame.
    """
    if mode not in ("auto", "seek", "sequential"):
        raise MediaError(f"mode must be 'auto', 'seek' or 'sequential'; got {mode!r}")
    check_frame_size(frame_size)
    upright = frame_size == "display"
    raw = np.asarray(indices)
    if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
        raise MediaError(f"indices must be a 1-D sequence of ints; got {indices!r}")
    with open_source(source) as src:
        if info is None:
            info = _probe_video_source(src, DEFAULT_MAX_PACKETS)
        idx = raw.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= info.num_frames):
            raise MediaError(
                f"frame indices must lie in [0, {info.num_frames}); got {int(idx.min())}..{int(idx.max())}"
            )
        if idx.size == 0:
            h, w = info.size(frame_size)
            return np.zeros((0, h, w, 3), dtype=np.uint8)
        uniq, inverse = np.unique(idx, return_inverse=True)
        try:
            try:
                frames = _decode_by_time(src, info, uniq, mode, upright)
            except _NoSeek:
                frames = _decode_by_time(src, info, uniq, "sequential", upright)
        except _NoTimestamps:
            frames = _decode_by_count(src, uniq, upright)
    shape = frames[0].shape
    if any(f.shape != shape for f in frames):
        raise MediaError(f"the decoded frames change size mid-stream ({shape} and others); cannot stack them")
    out = np.empty((len(idx),) + shape, dtype=np.uint8)
    for i, j in enumerate(inverse.tolist()):
        out[i] = frames[j]
    return out


# ------------------------------------------------------------------------------------------- sizing


def _sample(
    info: VideoInfo,
    lay: LayoutRules,
    fps: float | None,
    nframes: int | None,
    min_frames: int | None,
    max_frames: int | None,
    trim: tuple[float | None, float | None] = (None, None),
) -> np.ndarray:
    """The sampled frame indices under ``lay.frame_sampling`` (``trim``: qwen-vl-utils' ``video_start``,
    ``video_end``)."""
    rate = lay.fps if fps is None else fps
    lo = lay.min_frames if min_frames is None else min_frames
    hi = lay.max_frames if max_frames is None else max_frames
    if trim != (None, None):
        if lay.frame_sampling != "qwen-vl-utils":
            raise MediaError(
                f"video_start / video_end are qwen-vl-utils keys, which the {lay.name!r} processor does not "
                "read (its frames are sampled by transformers' video processor); trim the file instead"
            )
        return trimmed_frame_indices(
            info.num_frames, info.fps, *trim, fps=rate, nframes=nframes, min_frames=lo, max_frames=hi
        )
    if lay.frame_sampling == "ernie":  # rate only from the call: the class default has none
        return ernie_frame_indices(
            info.num_frames, info.fps, fps=fps, nframes=nframes, min_frames=lo, max_frames=hi
        )
    if lay.frame_sampling == "qwen-vl-utils":
        return sample_frame_indices(
            info.num_frames, info.fps, fps=rate, nframes=nframes, min_frames=lo, max_frames=hi
        )
    if lay.frame_sampling == "qwen3-vl" or nframes is not None:
        idx = qwen3_vl_frame_indices(
            info.num_frames,
            info.fps,
            fps=rate,
            nframes=nframes,
            min_frames=lo,
            max_frames=hi,
            temporal_patch_size=lay.temporal_patch_size,
        )
        if lay.frame_sampling in ("glm4v", "glm46v") and idx.size % 2:
            idx = np.append(idx, idx[-1])
        return idx
    if lay.frame_sampling == "glm46v":
        return glm46v_frame_indices(info.num_frames, info.fps, lay.temporal_patch_size)
    return glm4v_frame_indices(info.num_frames, info.fps, fps=rate, max_duration=lay.max_duration)


def _check_sizes_videos(lay: LayoutRules) -> None:
    """Refuse to size a video file under rules whose processor takes none, or whose sizing mrope does
    not reproduce (``rules.video_support``; the canvas rule's sliced frames)."""
    if lay.video_support != "sized":
        grids = (
            "pass its frames as images (load_image on each), or a grid you computed yourself as Video(grid=...)"
            if lay.video_support == "grids"
            else "pass its frames as images (load_image on each); its get_rope_index takes no videos"
        )
        raise MediaError(
            f"the {lay.name!r} processor takes no video (transformers has no video processor for it), so "
            f"mrope cannot size one the way the model is fed; {grids}"
        )
    if lay.positions_base == "canvas":
        raise MediaError(
            f"the {lay.name!r} processor samples and slices video frames with its own rules, which "
            "mrope.media does not reproduce; take the grids from the processor (its video_grid_thw / "
            "target_sizes) and pass Video(grid, tiles=..., thumbnail_grid=...) or Video(grid)"
        )


def load_video(
    source: Any,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    fps: float | None = None,
    nframes: int | None = None,
    min_frames: int | None = None,
    max_frames: int | None = None,
    wrap: bool = True,
    use_audio_in_video: bool = False,
    frame_size: FrameSize | None = None,
    reader: Reader | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    total_pixels: int | None = None,
    resized: tuple[int, int] | None = None,
    video_start: float | None = None,
    video_end: float | None = None,
) -> Video:
    """Size a video by a model's rules from its metadata alone: the :class:`mrope.Video` its processor
    would produce.

    Frames are sampled by ``rules.frame_sampling``: :func:`sample_frame_indices` (qwen-vl-utils),
    :func:`qwen3_vl_frame_indices`, :func:`glm4v_frame_indices` or :func:`glm46v_frame_indices`
    (transformers' video processors; with
    ``nframes``, evenly spaced as Qwen3-VL does, an even count for GLM). ``fps`` / ``min_frames`` /
    ``max_frames`` default to the rules'. Under ``rules.video_bounds == "frame"`` every sampled frame is
    resized with :func:`smart_resize` (``factor = rules.resize_factor``, ``min_pixels =
    rules.video_min_pixels``) under the qwen-vl-utils per-frame budget ``max(min(video_max_pixels,
    video_total_pixels / n * temporal_patch_size), int(video_min_pixels * 1.05))`` for ``n`` sampled
    frames; under ``"clip"`` with :func:`smart_resize_clip` (``video_min_pixels .. video_max_pixels``
    bound the clip's ``t * h * w``); under ``"tokens"`` (HY-V4-VL) with :func:`smart_resize_tokens`
    (never scaled up, each frame at most ``video_frame_max_pixels``, the clip's tokens with one newline
    a row within ``video_max_pixels / resize_factor**2``). The grid is
    ``(ceil(n / temporal_patch_size), H / patch_size, W / patch_size)``; ``fps`` is the sampling rate
    ``n / num_frames * video_fps``, ``second_per_grid = temporal_patch_size / fps`` (over
    ``rules.second_per_grid_fps`` instead when set, or the call's ``fps``: the omni processors), and
    ``frame_times`` are the sampled frames' times (seconds; real timestamps for a variable-rate file).

    ``H x W`` is the resized frame size, from ``info.size(frame_size)``: by default the display size
    (after the display rotation), what transformers' processors give the model for a video file (they
    decode with torchcodec, which rotates); ``frame_size="coded"`` sizes the stored frames, what the
    model gets when the frames come from transformers' ``load_video`` (default backend ``"pyav"``),
    PyAV or torchvision (no rotation). They differ for a video rotated by 90 or 270 degrees (a portrait
    phone video): h and w swap. See the module docstring for every reader.

    ``reader`` names the loader the processor is fed by (:mod:`mrope.media.readers`): ``"torchcodec"``
    (every family's processor for a video path: the default there), ``"pyav"``, ``"torchvision"`` or
    ``"decord"``. The frame count, rate and orientation are then that loader's, counted from the stream
    (a bounded packet scan), never a header's; ``frame_times`` are ``i / fps`` as the processor times
    them. ``None`` keeps the metadata probe above.

    Args:
        source: a path, bytes, a binary file-like object, or a :class:`VideoInfo` already probed.
        model, rules: the preset and overrides.
        fps: sampling rate, frames per second (not with ``nframes``).
        nframes: an exact number of frames to sample.
        min_frames, max_frames: bounds on the sampled count with ``fps``.
        wrap: emit the wrapper tokens (and Qwen3-VL timestamps).
        use_audio_in_video: for models with audio (the omni families): attach the file's audio track
            as ``Video.audio`` (:func:`mrope.media.load_audio`), as their processors do with
            ``load_audio_from_video``; a file without an audio stream stays a silent video.
        frame_size: ``"display"`` or ``"coded"``: which frames the model is given (see above; default
            ``"display"``, or the reader's orientation).
        reader: the loader to follow (see above); not with a :class:`VideoInfo` source.
        min_pixels, max_pixels, total_pixels, resized, video_start, video_end: one video's own keys, as
            qwen-vl-utils' ``fetch_video`` reads them (``vision_process.py``): ``min_pixels`` and
            ``total_pixels`` replace ``rules.video_min_pixels`` / ``video_total_pixels``; under
            ``video_bounds="frame"`` the per-frame ceiling is ``min(max_pixels, ceiling)``, elsewhere
            ``max_pixels`` replaces ``rules.video_max_pixels``; ``resized = (height, width)`` (its
            ``resized_height`` / ``resized_width``) is smart-resized under the image bounds instead of
            the frame size; ``video_start`` / ``video_end`` (seconds) trim the video before sampling
            (:func:`mrope.media.sampling.trimmed_frame_indices`; qwen-vl-utils sampling only).

    Raises:
        MediaError: see :func:`probe_video` and :func:`sample_frame_indices`; ``fps`` with ``nframes``;
            a ``frame_size`` other than ``"display"`` / ``"coded"``, or one the ``reader`` does not give;
            an unknown reader, or a file it cannot read (:func:`mrope.media.readers.reader_info`); rules whose processor takes no video
            (``rules.video_support`` other than ``"sized"``: PaddleOCR-VL, GLM-Image, HunyuanOCR) or
            slices its frames (``positions_base="canvas"``, MiniCPM-V 4.7): pass grids instead.
    """
    lay = resolve_rules(model, rules)
    _check_sizes_videos(lay)
    if fps is not None and nframes is not None:
        raise MediaError(f"pass fps or nframes, not both; got fps={fps!r}, nframes={nframes!r}")
    bounds = {
        k: v
        for k, v in (
            ("video_min_pixels", min_pixels),
            ("video_total_pixels", total_pixels),
            ("video_max_pixels", max_pixels if lay.video_bounds != "frame" else None),
        )
        if v is not None
    }
    if bounds:
        lay = dataclasses.replace(lay, **bounds)
    info = source if isinstance(source, VideoInfo) else probe_video(source)
    if reader is not None:
        check_reader(reader)
        seen = reader_info(source, reader, info, max_packets=DEFAULT_MAX_PACKETS)
        if frame_size is not None and frame_size != seen.frame_size:
            raise MediaError(
                f"reader={reader!r} hands over {seen.frame_size} frames; frame_size={frame_size!r} contradicts it "
                "(leave frame_size out)"
            )
        info, frame_size = seen.info, seen.frame_size
    frame_size = "display" if frame_size is None else frame_size
    check_frame_size(frame_size)
    height, width = info.size(frame_size)
    idx = _sample(info, lay, fps, nframes, min_frames, max_frames, (video_start, video_end))
    n = int(idx.size)
    tps = lay.temporal_patch_size
    if resized is not None:  # qwen-vl-utils: the given size, smart-resized under the image bounds
        new_h, new_w = smart_resize(
            resized[0], resized[1], lay.resize_factor, lay.image_min_pixels, lay.image_max_pixels
        )
    elif lay.video_bounds == "clip":
        new_h, new_w = smart_resize_clip(
            n, height, width, tps, lay.resize_factor, lay.video_min_pixels, lay.video_max_pixels
        )
    elif lay.video_bounds == "tokens":
        new_h, new_w = smart_resize_tokens(
            n, height, width, lay.resize_factor, lay.video_max_pixels, lay.video_frame_max_pixels
        )
    else:
        ceiling = video_max_pixels(n, lay.video_min_pixels, lay.video_max_pixels, lay.video_total_pixels, tps)
        if max_pixels is not None:
            ceiling = min(max_pixels, ceiling)
        new_h, new_w = smart_resize(height, width, lay.resize_factor, lay.video_min_pixels, ceiling)
    span = info.num_frames if video_start is None and video_end is None else int(idx[-1] - idx[0]) + 1
    rate = sample_fps(n, span, info.fps)
    # the rate second_per_grid is counted in: the sampled one, or the processor's fps keyword (the call's)
    spg_rate = rate if lay.second_per_grid_fps is None else (lay.second_per_grid_fps if fps is None else fps)
    times = sampled_times(info, idx)
    audio = None
    if use_audio_in_video:
        require_audio(lay, "load_video(use_audio_in_video=True)")
        if isinstance(source, VideoInfo):
            raise MediaError("use_audio_in_video needs the file itself, not a VideoInfo")
        if has_audio_stream(source):
            audio = audio_from_info(probe_audio(source), lay)
    return Video(
        grid=(math.ceil(n / tps), new_h // lay.patch_size, new_w // lay.patch_size),
        fps=rate,
        second_per_grid=tps / spg_rate,
        frame_times=tuple(float(x) for x in times),
        wrap=wrap,
        audio=audio,
    )
