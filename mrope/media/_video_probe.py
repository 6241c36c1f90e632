"""Read a video's metadata without decoding it: :func:`probe_video` -> :class:`~mrope.media.VideoInfo`.

Timing. A constant-rate file is timed by ``index / fps`` from its header. When the header lacks the
frame count or the duration, or its average rate disagrees with its base rate (a variable-rate hint),
:func:`probe_video` demuxes the packets (no decode, at most ``max_packets``) and reads their timestamps:
the frame count is the packet count, and if the intervals between sorted timestamps vary (any interval
more than 25 % off the median) the file is variable-rate and ``frame_times`` holds every frame's time.

Rotation. The display rotation is read from the container headers (the MP4 / MOV ``tkhd`` matrix, the
Matroska projection; :mod:`mrope.media._rotation`): ``width`` / ``height`` are the display size (after the
rotation), ``rotation`` the rotation and ``coded_size`` the coded frames' size.

Safety. Files reach FFmpeg only through :func:`mrope.media._container.open_container`, as a byte stream
that may open no other resource. Every failure is a :class:`~mrope.MediaError`.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import av
import numpy as np

from mrope._errors import MediaError
from mrope.media._container import open_container, video_stream
from mrope.media._deadline import DeadlineReader
from mrope.media._info import VideoInfo
from mrope.media._packets import scan_packets
from mrope.media._rotation import iso_rotations, matroska_rotation
from mrope.media._source import OpenSource, open_source

DEFAULT_MAX_PACKETS = 500_000
"""Most packets :func:`probe_video` demuxes when it must count or time frames (about 4.6 hours at
30 fps); it bounds the work a hostile file can cause."""

VFR_TOLERANCE = 0.25
"""A file whose frame intervals differ from their median by more than this fraction is variable-rate."""

_AVFMT_NOTIMESTAMPS = 0x0080
"""Demuxer flag: the format stores no timestamps (raw elementary streams); the parser makes them up."""


def synthetic_timestamps(container: av.container.InputContainer) -> bool:
    """Whether the container's format stores no timestamps, so the ones PyAV reports are made up."""
    return bool(container.format.flags & _AVFMT_NOTIMESTAMPS)


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


def probe_open_video(src: OpenSource, max_packets: int, deadline: float | None = None) -> VideoInfo:
    """:func:`probe_video` on a source already opened (see there for ``max_packets`` and ``deadline``)."""
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
        if scan.times is None or not tbf or synthetic_timestamps(container):
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
        deadline: a ``time.monotonic()`` value; the file is read through a
            :class:`~mrope.media._deadline.DeadlineReader` and packet counting looks at the clock (every
            :data:`~mrope.media._packets.DEADLINE_EVERY` packets), so the probe stops with
            :class:`ProbeDeadlineError` once it is past and a caller that gave up on a file does not
            leave the work running.

    Raises:
        MediaError: unreadable or corrupt data, no video stream (an audio-only file), a still image,
            no frame size, no frames, or no usable frame rate.
    """
    with open_source(source) as src:
        if deadline is not None:
            src = dataclasses.replace(src, file=DeadlineReader(src.file, deadline, src.name))  # type: ignore[arg-type]
        return probe_open_video(src, max_packets, deadline)
