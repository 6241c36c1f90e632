"""Real test media, generated on the fly (no fixtures on disk).

Images are written by PIL, videos by PyAV (H.264 through libx264 when this FFmpeg build has it, else
MPEG-4 Part 2). Every video frame is a solid colour that encodes its index (:func:`frame_colour`,
:func:`colour_index`), so a test can tell which frame it decoded.

Helpers (each returns the written :class:`~pathlib.Path`, or ``bytes`` for the ``*_bytes`` ones):

- :func:`image_bytes`, :func:`write_image`: PNG / JPEG / WebP / GIF, optional EXIF orientation.
- :func:`png_eXIf_after_idat`: a PNG whose EXIF chunk comes after the pixel data.
- :func:`forged_png`: a tiny PNG header that claims any size (decompression-bomb / truncation cases).
- :func:`write_video`: mp4 / mov / mkv / webm / avi / ts, any codec PyAV can encode, optional display
  rotation, optional explicit frame times (variable frame rate), GOP size.
- :func:`write_vfr_video`: a variable-frame-rate MP4 with given frame times.
- :func:`write_headerless_video`: streams without a frame count in the header: ``"mkv"`` (Matroska stores
  none), ``"webm"`` (VP8), ``"h264"`` / ``"m1v"`` (raw H.264 / MPEG-1: no container, no timestamps).
- :func:`write_audio`: an audio-only file (AAC in MP4 / M4A / MKV, or WAV).
- :func:`write_video_with_audio`: H.264 frames plus an AAC track (MP4 or MKV).
- :func:`truncated`, :func:`corrupted`, :func:`random_bytes`: damaged or meaningless bytes.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import av
import numpy as np
from PIL import Image

__all__ = [
    "colour_index",
    "corrupted",
    "forged_png",
    "frame_colour",
    "frame_rgb",
    "h264_codec",
    "image_bytes",
    "png_eXIf_after_idat",
    "random_bytes",
    "truncated",
    "write_audio",
    "write_video_with_audio",
    "write_headerless_video",
    "write_image",
    "write_vfr_video",
    "write_video",
]

# --------------------------------------------------------------------------------------------- images


def image_bytes(
    width: int,
    height: int,
    fmt: str = "PNG",
    *,
    orientation: int | None = None,
    colour: tuple[int, int, int] = (200, 30, 30),
) -> bytes:
    """An image of ``width x height`` pixels (as stored), optionally with EXIF orientation 1..8.

    The top-left quarter is white, so a rotation is visible if anyone decodes it.
    """
    arr = np.empty((height, width, 3), dtype=np.uint8)
    arr[:] = colour
    arr[: max(1, height // 4), : max(1, width // 4)] = 255
    img = Image.fromarray(arr, "RGB")
    buf = io.BytesIO()
    kwargs = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    if fmt.upper() == "GIF":
        img = img.convert("P")
    img.save(buf, fmt.upper(), **kwargs)
    return buf.getvalue()


def write_image(path: str | Path, width: int, height: int, fmt: str | None = None, **kwargs) -> Path:
    """:func:`image_bytes` written to ``path`` (format from the suffix unless given)."""
    path = Path(path)
    fmt = fmt or {".jpg": "JPEG", ".jpeg": "JPEG"}.get(path.suffix.lower(), path.suffix[1:].upper())
    path.write_bytes(image_bytes(width, height, fmt, **kwargs))
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png_eXIf_after_idat(width: int, height: int, orientation: int) -> bytes:
    """A valid PNG whose eXIf chunk (EXIF orientation) sits after IDAT, where PIL finds it only on load."""
    plain = image_bytes(width, height, "PNG")
    exif = Image.Exif()
    exif[0x0112] = orientation
    raw = exif.tobytes()
    if raw.startswith(b"Exif\x00\x00"):
        raw = raw[6:]
    iend = plain.rindex(b"IEND") - 4
    return plain[:iend] + _chunk(b"eXIf", raw) + plain[iend:]


def forged_png(width: int, height: int, payload: bytes = b"\x00" * 16) -> bytes:
    """A tiny PNG (RGB, 8 bit) whose header claims ``width x height`` over a few bytes of data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(payload))
        + _chunk(b"IEND", b"")
    )


# --------------------------------------------------------------------------------------------- videos

_LEVELS = 8
_STEP = 256 // _LEVELS


def frame_colour(index: int) -> tuple[int, int, int]:
    """The RGB colour of frame ``index`` (``index < 512``): three base-8 digits, 32 levels apart."""
    if not 0 <= index < _LEVELS**3:
        raise ValueError(f"frame_colour encodes indices 0..{_LEVELS**3 - 1}; got {index}")
    digits = (index % _LEVELS, (index // _LEVELS) % _LEVELS, index // _LEVELS**2)
    return tuple(d * _STEP + _STEP // 2 for d in digits)  # type: ignore[return-value]


def colour_index(rgb: Sequence[float]) -> int:
    """The frame index a decoded colour (mean RGB of a frame's centre) stands for."""
    digits = [min(_LEVELS - 1, max(0, int(round((c - _STEP // 2) / _STEP)))) for c in rgb[:3]]
    return digits[0] + digits[1] * _LEVELS + digits[2] * _LEVELS**2


def frame_rgb(index: int, width: int, height: int, marker: bool = False) -> np.ndarray:
    """uint8 ``[height, width, 3]``: frame ``index``'s colour; ``marker`` paints the top-left eighth white."""
    arr = np.empty((height, width, 3), dtype=np.uint8)
    arr[:] = frame_colour(index)
    if marker:
        arr[: max(2, height // 8), : max(2, width // 8)] = 255
    return arr


@lru_cache(maxsize=1)
def h264_codec() -> str:
    """``"libx264"`` when this FFmpeg build can encode H.264, else ``"mpeg4"``."""
    try:
        av.codec.Codec("libx264", "w")
        return "libx264"
    except Exception:
        return "mpeg4"


_FORMATS = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm", ".avi": "avi", ".ts": "mpegts"}


def write_video(
    path: str | Path,
    num_frames: int = 24,
    fps: int | Fraction = 12,
    width: int = 64,
    height: int = 48,
    *,
    codec: str = "h264",
    rotation: int | None = None,
    frame_times: Sequence[float] | None = None,
    gop: int | None = None,
    marker: bool = False,
    crf: int = 12,
) -> Path:
    """Encode ``num_frames`` solid-colour frames (frame k has :func:`frame_colour` ``(k)``).

    Args:
        path: output file; the container follows the suffix (``.mp4 .mov .mkv .webm .avi .ts``).
        fps: nominal frame rate.
        codec: ``"h264"`` (libx264, or MPEG-4 when unavailable), or any PyAV encoder name.
        rotation: display rotation, counter-clockwise degrees (written as a display matrix; MP4 / MOV
            store it in the track header, Matroska as the projection roll).
        frame_times: explicit frame times in seconds (variable frame rate), increasing.
        gop: keyframe interval in frames.
        marker: paint the top-left corner of every frame white (to see rotations).
        crf: x264 quality (lower is better; solid colours survive any value below ~30).
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"unknown video suffix {path.suffix!r}; expected one of {sorted(_FORMATS)}")
    name = h264_codec() if codec == "h264" else codec
    options = {"crf": str(crf), "preset": "ultrafast"} if name == "libx264" else {}
    if name == "libx264" and gop is None:
        options["bframes"] = "2"
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(name, rate=fps, options=options)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        if name in ("mpeg4", "libvpx"):
            stream.codec_context.bit_rate = 2_000_000
        if rotation is not None:
            stream.set_display_rotation(rotation)
        tb = None
        if frame_times is not None:
            if len(frame_times) != num_frames:
                raise ValueError("frame_times needs one time per frame")
            tb = Fraction(1, 1000)
            stream.codec_context.time_base = tb
        for k in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_rgb(k, width, height, marker), format="rgb24")
            if frame_times is not None:
                frame.pts = int(round(frame_times[k] * 1000))
                frame.time_base = tb
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def write_vfr_video(
    path: str | Path, frame_times: Sequence[float], width: int = 64, height: int = 48
) -> Path:
    """A variable-frame-rate H.264 MP4 whose frame k is shown at ``frame_times[k]`` seconds."""
    nominal = max(1, round((len(frame_times) - 1) / max(frame_times[-1] - frame_times[0], 1e-3)))
    return write_video(path, len(frame_times), nominal, width, height, frame_times=frame_times)


def write_headerless_video(
    path: str | Path,
    kind: str = "mkv",
    num_frames: int = 24,
    fps: int = 12,
    width: int = 64,
    height: int = 48,
) -> Path:
    """A video whose header has no frame count: ``"mkv"`` (H.264 in Matroska), ``"webm"`` (VP8),
    ``"h264"`` (a raw Annex B stream: no container, no timestamps; the rate is only in the SPS) or
    ``"m1v"`` (a raw MPEG-1 video stream, which PIL also "identifies" as an image format).

    ``path``'s suffix is replaced to match ``kind``.
    """
    path = Path(path)
    if kind == "mkv":
        return write_video(path.with_suffix(".mkv"), num_frames, fps, width, height)
    if kind == "webm":
        return write_video(path.with_suffix(".webm"), num_frames, fps, width, height, codec="libvpx")
    raw = {
        "h264": ("h264", "libx264", {"crf": "12", "preset": "ultrafast"}),
        "m1v": ("mpeg1video", "mpeg1video", {}),
    }
    if kind not in raw:
        raise ValueError(f"kind must be 'mkv', 'webm', 'h264' or 'm1v'; got {kind!r}")
    fmt, codec, options = raw[kind]
    if codec == "libx264" and h264_codec() != "libx264":
        raise RuntimeError("a raw H.264 stream needs libx264 in PyAV's FFmpeg")
    path = path.with_suffix("." + kind)
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "mpeg1video":
            stream.codec_context.bit_rate = 2_000_000
        for k in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_rgb(k, width, height), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _encode_tone(
    out: av.container.OutputContainer, stream: av.audio.stream.AudioStream, n: int, rate: int
) -> None:
    """Encode ``n`` samples of a 440 Hz tone into ``stream`` (interleaving is left to the muxer)."""
    pcm = stream.codec_context.name.startswith("pcm")
    t = np.arange(n) / rate
    tone = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)[None, :]
    frame_size = stream.codec_context.frame_size or 1024
    for start in range(0, n, frame_size):
        chunk = np.ascontiguousarray(tone[:, start : start + frame_size])
        if not pcm:
            chunk = np.ascontiguousarray(chunk.astype(np.float32) / 32768.0)
        frame = av.AudioFrame.from_ndarray(chunk, format="s16" if pcm else "fltp", layout="mono")
        frame.sample_rate = rate
        frame.pts = start
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)


def write_audio(path: str | Path, seconds: float = 0.5, rate: int = 16000) -> Path:
    """An audio-only file of ``int(seconds * rate)`` samples (a 440 Hz tone): PCM for ``.wav``, AAC in
    MP4 for ``.mp4`` / ``.m4a``, AAC in Matroska for ``.mkv``."""
    path = Path(path)
    suffix = path.suffix.lower()
    fmt = {".wav": "wav", ".mkv": "matroska"}.get(suffix, "mp4")
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream("pcm_s16le" if fmt == "wav" else "aac", rate=rate, layout="mono")
        _encode_tone(out, stream, int(seconds * rate), rate)
    return path


def write_video_with_audio(
    path: str | Path,
    num_frames: int = 24,
    fps: int = 12,
    audio_seconds: float = 2.0,
    rate: int = 44100,
    width: int = 64,
    height: int = 48,
) -> Path:
    """H.264 (or MPEG-4) frames plus an AAC track of ``int(audio_seconds * rate)`` samples, in MP4 or
    MKV (by suffix)."""
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    name = h264_codec()
    options = {"crf": "12", "preset": "ultrafast"} if name == "libx264" else {}
    with av.open(str(path), "w", format=fmt) as out:
        video = out.add_stream(name, rate=fps, options=options)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        if name == "mpeg4":
            video.codec_context.bit_rate = 2_000_000
        audio = out.add_stream("aac", rate=rate, layout="mono")
        for k in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_rgb(k, width, height), format="rgb24")
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode():
            out.mux(packet)
        _encode_tone(out, audio, int(audio_seconds * rate), rate)
    return path


# -------------------------------------------------------------------------------------- damaged bytes


def truncated(data: bytes, keep: float | int = 0.5) -> bytes:
    """The first ``keep`` bytes (an int) or fraction (a float) of ``data``."""
    n = keep if isinstance(keep, int) else int(len(data) * keep)
    return data[:n]


def corrupted(
    data: bytes, seed: int = 0, fraction: float = 0.2, skip: int = 0, end: int | None = None
) -> bytes:
    """``data`` with ``fraction`` of its bytes in ``[skip, end)`` replaced by random ones."""
    rng = random.Random(seed)
    out = bytearray(data)
    stop = len(out) if end is None else min(end, len(out))
    for _ in range(max(1, int((stop - skip) * fraction))):
        out[rng.randrange(skip, stop)] = rng.randrange(256)
    return bytes(out)


def random_bytes(n: int = 4096, seed: int = 0) -> bytes:
    """``n`` random bytes."""
    return random.Random(seed).randbytes(n)
