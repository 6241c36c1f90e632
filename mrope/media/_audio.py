"""Read an audio track's length (:func:`probe_audio`) and size it as an omni processor does (:func:`load_audio`).

:func:`load_audio` gives the :class:`mrope.Audio` an omni model's processor would make of an audio file,
or of a video file's audio track.

Positions need only the clip's length, so nothing is decoded when the container says enough: the
stream's duration in its time base (exact samples for WAV and for AAC in MP4, whose edit list drops the
encoder's priming), else the end of the stream's last packet (demuxed, not decoded, at most
``max_packets``; Matroska keeps no per-stream duration and its timestamps are in milliseconds), else
the container's duration.

The processors resample to the model's rate (16 kHz) the way ``librosa.load`` does, so a clip of ``n``
samples at ``sr`` Hz becomes ``ceil(n * (16000 / sr))`` samples (``librosa.resample``'s length rule, in
float64 as it computes it), and then mel frames by the family's rule (:func:`mrope._audio_grid.frames_from_samples`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import av

from mrope._audio_grid import frames_from_samples, require_audio
from mrope._errors import MediaError
from mrope._rules import LayoutRules
from mrope._segments import Audio
from mrope.media._container import open_container, stream_kinds
from mrope.media._deadline import DeadlineReader, ProbeDeadlineError
from mrope.media._info import AudioInfo
from mrope.media._packets import DEADLINE_EVERY
from mrope.media._source import OpenSource, open_source
from mrope.models import resolve_rules

DEFAULT_MAX_AUDIO_PACKETS = 2_000_000
"""Most packets :func:`probe_audio` demuxes when the headers give no duration (about 12 hours of AAC
at 48 kHz); it bounds the work a hostile file can cause."""

MAX_AUDIO_SECONDS = 48 * 3600.0
"""Longest audio track accepted, seconds (a header claiming more is refused); the one home of this bound."""


def _packet_span(
    container: Any, stream: Any, tb: float | None, max_packets: int, name: str, deadline: float | None
) -> float | None:
    """Seconds from the stream's start (0 when the first packets are priming, before 0) to the end of
    its last packet, or ``None`` without timestamps; past ``deadline`` (looked at every
    :data:`~mrope.media._packets.DEADLINE_EVERY` packets) a :class:`ProbeDeadlineError`."""
    if not tb:
        return None
    first: int | None = None
    end: int | None = None
    count = 0
    try:
        for packet in container.demux(stream):
            if packet.size == 0 or packet.pts is None:
                continue
            count += 1
            if deadline is not None and count % DEADLINE_EVERY == 0 and time.monotonic() > deadline:
                raise ProbeDeadlineError(
                    f"{name}: stopped after {count} audio packets, past the probe's deadline"
                )
            if count > max_packets:
                raise MediaError(
                    f"{name}: the audio stream has no duration in its headers and more than {max_packets} packets"
                )
            first = packet.pts if first is None else min(first, packet.pts)
            stop = packet.pts + int(packet.duration or 0)
            end = stop if end is None else max(end, stop)
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(f"{name}: demuxing the audio failed ({type(exc).__name__}: {exc})") from None
    if first is None or end is None:
        return None
    return (end - max(first, 0)) * tb


def _probe_audio_source(src: OpenSource, max_packets: int, deadline: float | None) -> AudioInfo:
    container = open_container(src)
    try:
        if not container.streams.audio:
            raise MediaError(
                f"{src.name} has no audio stream (streams: {stream_kinds(container)}); expected audio"
            )
        stream = container.streams.audio[0]
        cc = stream.codec_context
        rate = int(stream.sample_rate or (cc.sample_rate if cc is not None else 0) or 0)
        if rate <= 0:
            raise MediaError(f"{src.name}: the audio stream has no sample rate")
        channels = int(cc.channels) if cc is not None and cc.channels else 1
        common = dict(codec=cc.name if cc is not None else "", container=container.format.name)
        tb = float(stream.time_base) if stream.time_base else None
        seconds: float | None = None
        timing = "stream"
        if stream.duration and tb:
            seconds = stream.duration * tb
        else:  # no per-stream duration (Matroska): the end of the last packet, demuxed, not decoded
            seconds, timing = _packet_span(container, stream, tb, max_packets, src.name, deadline), "packets"
            if seconds is None and container.duration:
                seconds, timing = container.duration / av.time_base, "container"
        if seconds is None:
            seconds = 0.0
        if not (math.isfinite(seconds) and seconds > 0):
            raise MediaError(f"{src.name}: the audio stream has no duration (no samples)")
        if seconds > MAX_AUDIO_SECONDS:
            raise MediaError(
                f"{src.name}: the audio stream claims {seconds:.0f} s; at most {MAX_AUDIO_SECONDS:.0f} s is accepted"
            )
        return AudioInfo(rate, max(1, round(seconds * rate)), channels, timing=timing, **common)
    finally:
        container.close()


def probe_audio(
    source: Any, *, max_packets: int = DEFAULT_MAX_AUDIO_PACKETS, deadline: float | None = None
) -> AudioInfo:
    """Read an audio track's sample rate and length without decoding (an audio file, or a video's
    first audio stream).

    ``deadline``: a ``time.monotonic()`` value; the container is read through a
    :class:`~mrope.media._deadline.DeadlineReader` and packet counting looks at the clock, so the probe
    stops with :class:`~mrope.media._deadline.ProbeDeadlineError` once it is past.

    Raises:
        MediaError: unreadable data, no audio stream, no sample rate or no duration.
    """
    if isinstance(max_packets, bool) or not isinstance(max_packets, int) or max_packets < 1:
        raise MediaError(f"max_packets must be an int >= 1; got {max_packets!r}")
    with open_source(source) as src:
        if deadline is not None:
            src = dataclasses.replace(src, file=DeadlineReader(src.file, deadline, src.name))  # type: ignore[arg-type]
        return _probe_audio_source(src, max_packets, deadline)


def stream_types(source: Any) -> tuple[str, ...]:
    """The types of a media file's streams (``"video"``, ``"audio"``, ...; headers only)."""
    with open_source(source) as src:
        container = open_container(src)
        try:
            return tuple(s.type for s in container.streams)
        finally:
            container.close()


def has_audio_stream(source: Any) -> bool:
    """Whether a media file has an audio stream (headers only)."""
    return "audio" in stream_types(source)


def resampled_length(num_samples: int, sample_rate: int, target_rate: int) -> int:
    """Samples after resampling to ``target_rate``: ``ceil(n * (target / sr))`` in float64, as
    ``librosa.resample`` sizes its output (``n`` when the rates agree)."""
    if sample_rate == target_rate:
        return int(num_samples)
    return int(math.ceil(num_samples * (float(target_rate) / sample_rate)))


def audio_from_info(info: AudioInfo, rules: LayoutRules, wrap: bool = True) -> Audio:
    """The :class:`mrope.Audio` of a probed track under ``rules`` (mel frames by the family's rule)."""
    samples = resampled_length(info.num_samples, info.sample_rate, rules.audio_sampling_rate)
    return Audio(mel_frames=max(1, frames_from_samples(samples, rules)), wrap=wrap)


def load_audio(
    source: Any,
    model: Any = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    wrap: bool = True,
) -> Audio:
    """The :class:`mrope.Audio` an omni model's processor makes of an audio file (or of a video file's
    audio track): its length in mel frames, from the container's metadata.

    Args:
        source: a path, bytes, a binary file-like object, or an :class:`AudioInfo` already probed.
        model, rules: the model family (it must have audio, e.g. ``"qwen2.5-omni"``) and overrides.
        wrap: emit the audio start / end tokens.

    Raises:
        MediaError: see :func:`probe_audio`. LayoutError: the model has no audio.
    """
    lay = resolve_rules(model, rules)
    require_audio(lay, "load_audio")
    info = source if isinstance(source, AudioInfo) else probe_audio(source)
    return audio_from_info(info, lay, wrap)


__all__ = [
    "DEFAULT_MAX_AUDIO_PACKETS",
    "MAX_AUDIO_SECONDS",
    "AudioInfo",
    "audio_from_info",
    "has_audio_stream",
    "load_audio",
    "probe_audio",
    "resampled_length",
    "stream_types",
]
