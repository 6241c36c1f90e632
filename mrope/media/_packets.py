"""Demux a video stream's packets without decoding: the count and timestamps the probe and the readers use.

:func:`scan_packets` is the one packet loop of the video readers: :func:`mrope.media.probe_video` times
frames from its sorted timestamps, :func:`mrope.media._readers.reader_info` counts frames and takes the
stream's first timestamp and last timestamp plus duration (torchcodec's average rate) from it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

from mrope._errors import MediaError
from mrope.media._deadline import ProbeDeadlineError

DEADLINE_EVERY = 1024
"""Packets demuxed between two looks at the clock when a scan has a deadline."""


@dataclass(frozen=True)
class PacketScan:
    """What one pass over a video stream's packets saw (empty and discarded packets are skipped).

    Attributes:
        count: the packets counted (at most ``max_packets``).
        times: int64 sorted timestamps (``pts``, else ``dts``; stream time base) of every packet counted,
            or ``None`` when one has neither (or none was counted).
        first: the smallest timestamp (stream time base), ``None`` when no packet has one.
        end: the largest timestamp plus its packet's duration, ``None`` when no packet has one.
        truncated: the stream holds more than ``max_packets`` packets: the scan stopped there, and
            ``times``, ``first`` and ``end`` are ``None``.
    """

    count: int
    times: np.ndarray | None
    first: int | None
    end: int | None
    truncated: bool


def scan_packets(
    container: av.container.InputContainer,
    stream: Any,
    max_packets: int,
    name: str,
    deadline: float | None = None,
) -> PacketScan:
    """Demux ``stream`` of ``container`` (never decoding) up to ``max_packets`` counted packets.

    Args:
        container, stream: an open container (:func:`mrope.media._container.open_container`) and its
            video stream.
        max_packets: most packets counted; one more makes the scan ``truncated``.
        name: the source's name, for messages.
        deadline: a ``time.monotonic()`` value, checked every :data:`DEADLINE_EVERY` packets.

    Raises:
        ProbeDeadlineError: past ``deadline``.
        MediaError: the demuxer failed (naming how many packets it had counted).
    """
    stamps: list[int] = []
    count = 0
    complete = True
    first, end = math.inf, -math.inf
    try:
        for packet in container.demux(stream):
            if packet.size == 0 or packet.is_discard:
                continue
            count += 1
            if count > max_packets:
                return PacketScan(count - 1, None, None, None, True)
            if deadline is not None and count % DEADLINE_EVERY == 0 and time.monotonic() > deadline:
                raise ProbeDeadlineError(f"{name}: stopped after {count} packets, past the probe's deadline")
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None:
                complete = False
                continue
            if complete:
                stamps.append(ts)
            if ts < first:
                first = ts
            stop = ts + (packet.duration or 0)
            if stop > end:
                end = stop
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(
            f"{name}: demuxing failed after {count} packets ({type(exc).__name__}: {exc})"
        ) from None
    times = np.sort(np.asarray(stamps, dtype=np.int64)) if complete and stamps else None
    if not math.isfinite(first):
        return PacketScan(count, times, None, None, False)
    return PacketScan(count, times, int(first), int(end), False)


__all__ = ["DEADLINE_EVERY", "PacketScan", "scan_packets"]
