"""Decode chosen frames of a video to RGB pixels: :func:`decode_frames`.

Frames are found by their presentation timestamps, seeking to the keyframe before a distant frame and
decoding forward otherwise; streams without timestamps are decoded from the start, counting frames.
``frame_size`` says whether frames come upright (``"display"``: the display rotation applied, as
torchcodec returns them) or as stored (``"coded"``: as PyAV and transformers' ``load_video`` return
them); see :mod:`mrope.media._video`. Every failure is a :class:`~mrope.MediaError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

import av
import numpy as np

from mrope._errors import MediaError
from mrope.media._container import open_container, video_stream
from mrope.media._info import FrameSize, VideoInfo, check_frame_size
from mrope.media._rotation import normalise_rotation
from mrope.media._source import OpenSource, open_source
from mrope.media._video_probe import DEFAULT_MAX_PACKETS, probe_open_video, synthetic_timestamps

DecodeMode = Literal["auto", "seek", "sequential"]

_NO_INDEX_SEEK_GAP_S = 4.0
"""Without a keyframe index, :func:`decode_frames` seeks only across gaps longer than this (seconds)."""


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
        if synthetic_timestamps(container):
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
        frame_size: ``"display"`` (upright) or ``"coded"`` (as stored); see :mod:`mrope.media._video`.

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
            info = probe_open_video(src, DEFAULT_MAX_PACKETS)
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
