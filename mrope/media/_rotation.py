"""Display rotation read straight from container headers (ISO-BMFF ``tkhd`` and Matroska ``Projection``).

PyAV exposes the display matrix only on decoded frames. To know a video's display size without decoding,
these readers walk the container's box / element tree (seeking over media data, bounded in the number of
boxes read) and return the rotation the way FFmpeg derives it, in counter-clockwise degrees (the sign of
``VideoFrame.rotation``), rounded to a multiple of 90 and normalised to ``0, 90, 180, 270``.
"""

from __future__ import annotations

import math
import struct
from typing import IO

_MAX_BOXES = 20_000
_ISO_TOP = {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"uuid", b"styp", b"sidx"}
_EBML_MAGIC = b"\x1a\x45\xdf\xa3"


def normalise_rotation(degrees: float) -> int:
    """Counter-clockwise degrees -> the nearest of 0, 90, 180, 270 (NaN -> 0)."""
    if not math.isfinite(degrees):
        return 0
    return int(round(degrees / 90.0)) % 4 * 90


def _matrix_rotation(a: float, b: float, c: float, d: float) -> float | None:
    """FFmpeg's ``av_display_rotation_get`` on the 2x2 part ``[[a, b], [c, d]]`` of a display matrix."""
    s0, s1 = math.hypot(a, c), math.hypot(b, d)
    if s0 == 0 or s1 == 0:
        return None
    return -math.degrees(math.atan2(b / s1, a / s0))


# ------------------------------------------------------------------------------------------- ISO-BMFF


def _boxes(f: IO[bytes], start: int, end: int, budget: list[int]):
    """Yield ``(type, payload_start, payload_end)`` of the boxes in ``[start, end)``."""
    pos = start
    while pos + 8 <= end and budget[0] > 0:
        budget[0] -= 1
        f.seek(pos)
        head = f.read(8)
        if len(head) < 8:
            return
        size, kind = struct.unpack(">I4s", head)
        hdr = 8
        if size == 1:
            ext = f.read(8)
            if len(ext) < 8:
                return
            size = struct.unpack(">Q", ext)[0]
            hdr = 16
        elif size == 0:
            size = end - pos
        if size < hdr:
            return
        yield kind, pos + hdr, min(pos + size, end)
        pos += size


def _read_matrix(f: IO[bytes], at: int) -> tuple[float, float, float, float]:
    f.seek(at)
    raw = f.read(36)
    if len(raw) < 36:
        raise ValueError("short matrix")
    m = struct.unpack(">9i", raw)
    return m[0] / 65536, m[1] / 65536, m[3] / 65536, m[4] / 65536


def iso_rotations(f: IO[bytes], size: int) -> dict[int, int]:
    """``{track_id: rotation}`` of the video tracks of an MP4 / MOV file (``{}`` if none or not ISO-BMFF).

    The track matrix is multiplied by the movie matrix (``mvhd``), as FFmpeg does.
    """
    f.seek(0)
    if f.read(8)[4:8] not in _ISO_TOP:
        return {}
    budget = [_MAX_BOXES]
    out: dict[int, int] = {}
    for kind, a, b in _boxes(f, 0, size, budget):
        if kind != b"moov":
            continue
        movie = (1.0, 0.0, 0.0, 1.0)
        traks = []
        for k2, a2, b2 in _boxes(f, a, b, budget):
            if k2 == b"mvhd":
                f.seek(a2)
                version = f.read(1)[0]
                movie = _read_matrix(f, a2 + (48 if version == 1 else 36))
            elif k2 == b"trak":
                traks.append((a2, b2))
        for a2, b2 in traks:
            track_id, matrix, is_video = None, None, False
            for k3, a3, b3 in _boxes(f, a2, b2, budget):
                if k3 == b"tkhd":
                    f.seek(a3)
                    version = f.read(1)[0]
                    f.seek(a3 + (20 if version == 1 else 12))
                    track_id = struct.unpack(">I", f.read(4))[0]
                    matrix = _read_matrix(f, a3 + (52 if version == 1 else 40))
                elif k3 == b"mdia":
                    for k4, a4, _b4 in _boxes(f, a3, b3, budget):
                        if k4 == b"hdlr":
                            f.seek(a4 + 8)
                            is_video = f.read(4) == b"vide"
            if track_id is None or matrix is None or not is_video:
                continue
            ta, tb, tc, td = matrix
            ma, mb, mc, md = movie
            # (track 2x2) @ (movie 2x2), row-major [[a, b], [c, d]]
            deg = _matrix_rotation(ta * ma + tb * mc, ta * mb + tb * md, tc * ma + td * mc, tc * mb + td * md)
            out[track_id] = normalise_rotation(deg) if deg is not None else 0
        break
    return out


# ------------------------------------------------------------------------------------------- Matroska

_SEGMENT, _TRACKS, _TRACK_ENTRY, _TRACK_TYPE = 0x18538067, 0x1654AE6B, 0xAE, 0x83
_VIDEO, _PROJECTION, _YAW, _PITCH, _ROLL, _CLUSTER = 0xE0, 0x7670, 0x7673, 0x7674, 0x7675, 0x1F43B675


def _vint(f: IO[bytes], keep_marker: bool) -> tuple[int, int] | None:
    """One EBML variable-length int: ``(value, length)``; ``value`` is -1 for an unknown size."""
    first = f.read(1)
    if not first:
        return None
    b0 = first[0]
    length = 1
    while length <= 8 and not (b0 & (0x80 >> (length - 1))):
        length += 1
    if length > 8:
        return None
    rest = f.read(length - 1)
    if len(rest) < length - 1:
        return None
    value = b0 if keep_marker else b0 & (0xFF >> length)
    for byte in rest:
        value = (value << 8) | byte
    if not keep_marker and value == (1 << (7 * length)) - 1:
        return -1, length
    return value, length


def _elements(f: IO[bytes], start: int, end: int, budget: list[int]):
    """Yield ``(id, payload_start, payload_end)``; an unknown size runs to ``end``."""
    pos = start
    while pos < end and budget[0] > 0:
        budget[0] -= 1
        f.seek(pos)
        got = _vint(f, True)
        if got is None:
            return
        eid, n1 = got
        got = _vint(f, False)
        if got is None:
            return
        size, n2 = got
        a = pos + n1 + n2
        b = end if size < 0 else min(a + size, end)
        yield eid, a, b
        if size < 0:
            return
        pos = b


def _float(f: IO[bytes], a: int, b: int) -> float:
    f.seek(a)
    raw = f.read(b - a)
    if len(raw) == 4:
        return struct.unpack(">f", raw)[0]
    if len(raw) == 8:
        return struct.unpack(">d", raw)[0]
    return 0.0


def matroska_rotation(f: IO[bytes], size: int) -> int | None:
    """Rotation of the first video track of a Matroska / WebM file (``None`` if not Matroska or no video
    track). FFmpeg maps ``ProjectionPoseRoll`` to the display rotation when pitch is 0 and yaw 0 or 180."""
    f.seek(0)
    if f.read(4) != _EBML_MAGIC:
        return None
    budget = [_MAX_BOXES]
    for eid, a, b in _elements(f, 0, size, budget):
        if eid != _SEGMENT:
            continue
        for eid2, a2, b2 in _elements(f, a, b, budget):
            if eid2 == _CLUSTER:
                return None
            if eid2 != _TRACKS:
                continue
            for eid3, a3, b3 in _elements(f, a2, b2, budget):
                if eid3 != _TRACK_ENTRY:
                    continue
                track_type, pose = None, (0.0, 0.0, 0.0)
                for eid4, a4, b4 in _elements(f, a3, b3, budget):
                    if eid4 == _TRACK_TYPE:
                        f.seek(a4)
                        track_type = int.from_bytes(f.read(b4 - a4), "big")
                    elif eid4 == _VIDEO:
                        for eid5, a5, b5 in _elements(f, a4, b4, budget):
                            if eid5 != _PROJECTION:
                                continue
                            yaw = pitch = roll = 0.0
                            for eid6, a6, b6 in _elements(f, a5, b5, budget):
                                if eid6 == _YAW:
                                    yaw = _float(f, a6, b6)
                                elif eid6 == _PITCH:
                                    pitch = _float(f, a6, b6)
                                elif eid6 == _ROLL:
                                    roll = _float(f, a6, b6)
                            pose = (yaw, pitch, roll)
                if track_type == 1:
                    yaw, pitch, roll = pose
                    if pitch != 0.0 or yaw not in (0.0, 180.0, -180.0):
                        return 0
                    return normalise_rotation(roll)
            return None
        return None
    return None
