"""Uploaded files -> segments: kind by content, size or metadata checked against the caps, then sized by
:mod:`mrope.media` (headers and container metadata only, never a full decode).

All file work runs in worker threads (at most ``MROPE_MEDIA_THREADS`` at once, timed-out ones
included until they stop: :class:`MediaSlots`), each bounded by ``MROPE_MEDIA_TIMEOUT_S`` (the request
answers then, and packet counting stops at the same deadline), so a slow or hostile file never stalls
the event loop or other requests, and never leaves work running past the thread budget.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from PIL import Image as PILImage
from prometheus_client import Gauge, Histogram

import mrope
from mrope.errors import MediaError, MRopeError
from mrope.media import (
    DEFAULT_MAX_IMAGE_PIXELS,
    detect_media_kind,
    has_audio_stream,
    image_size,
    load_audio,
    load_image,
    load_video,
    probe_audio,
    probe_video,
)
from mrope.media.detect import NOT_PICTURE_FORMATS
from mrope.media.video import ProbeDeadlineError
from mrope.rules import LayoutRules
from mrope.schema import FileItem

from .convert import check_audio_meta, check_image_pixels, check_video_meta
from .errors import ServiceError
from .logtext import log_text
from .settings import Settings
from .uploads import StoredFile

log = logging.getLogger("mrope.service")

SNIFF_BYTES = 64 * 1024
"""Bytes read from the start of a file to tell an image from a video."""

T = TypeVar("T")
_BYTES_NAME = re.compile(r"<\d+ bytes>")


@dataclass(frozen=True)
class LoadedFile:
    """A file placed in the sequence: its segment and what the service learned about it."""

    segment: mrope.Image | mrope.Video | mrope.Audio
    info: dict[str, Any]


def _name(stored: StoredFile) -> str:
    return f"file {stored.index}" + (f" ({stored.filename!r})" if stored.filename else "")


def detect_kind(stored: StoredFile, settings: Settings, deadline: float | None = None) -> tuple[str, Any]:
    """``("image", None)``, ``("audio", None)`` or ``("video", VideoInfo | None)`` from the file's bytes (its name and declared
    type are ignored).

    The leading :data:`SNIFF_BYTES` go to :func:`mrope.media.detect_media_kind`. An image whose header
    is longer (a JPEG with a 100 KB ICC profile, a PNG with a large XMP chunk) or a video whose index
    sits at its end (an MP4 with ``moov`` last) cannot be recognised from its head, so when the head
    is not enough the whole file's header is read by PIL, then the file is probed as a video, before
    giving up.
    """
    if stored.size == 0:
        raise ServiceError(
            422, "invalid_media", f"{_name(stored)} is empty (0 bytes); expected an image or a video"
        )
    with open(stored.path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    try:
        return detect_media_kind(head), None
    except MediaError:
        if stored.size <= len(head):
            raise
    if pil_identifies(stored.path):  # an image header longer than the head (a 100 KB ICC profile)
        return "image", None
    try:
        return "video", probe_video(stored.path, max_packets=settings.max_video_frames + 1, deadline=deadline)
    except ProbeDeadlineError:
        raise
    except MediaError as exc:
        raise MediaError(f"{_name(stored)} is neither a readable image nor a readable video: {exc}") from None


def pil_identifies(path: str) -> bool:
    """Whether PIL reads ``path``'s header as a picture (headers only: PIL reads pixels lazily).

    An image whose declared size trips PIL's bomb guard counts: its size is refused with a clear error
    by the pixel cap afterwards.
    """
    try:
        with PILImage.open(path) as im:
            return im.format not in NOT_PICTURE_FORMATS
    except PILImage.DecompressionBombError:
        return True
    except Exception:  # noqa: BLE001 - PIL raises many types on bytes that are not an image
        return False


def load_image_file(
    stored: StoredFile, item: FileItem, model: str, rules: LayoutRules, settings: Settings
) -> LoadedFile:
    """Header size -> pixel cap -> :func:`mrope.media.load_image`."""
    # the library's own bomb guard still applies; the service's cap is checked here so that its
    # error names MROPE_MAX_IMAGE_PIXELS
    height, width = image_size(
        stored.path, max_pixels=max(settings.max_image_pixels, DEFAULT_MAX_IMAGE_PIXELS)
    )
    check_image_pixels(height, width, settings, _name(stored))
    image = load_image(stored.path, model=model, rules=rules, wrap=item.wrap)
    return LoadedFile(image, {"kind": "image", "width": width, "height": height, "grid": list(image.grid)})


def load_video_file(
    stored: StoredFile,
    item: FileItem,
    model: str,
    rules: LayoutRules,
    settings: Settings,
    meta: Any,
    deadline: float | None = None,
) -> LoadedFile:
    """Container metadata -> duration / frame / frame-size caps -> :func:`mrope.media.load_video`."""
    if meta is None:
        meta = probe_video(stored.path, max_packets=settings.max_video_frames + 1, deadline=deadline)
    name = _name(stored)
    check_video_meta(meta, settings, name)
    video = load_video(meta, model=model, rules=rules, fps=item.fps, nframes=item.nframes, wrap=item.wrap)
    if item.use_audio_in_video and has_audio_stream(stored.path):  # omni models: the video's own track
        video = dataclasses.replace(video, audio=load_audio(stored.path, model=model, rules=rules))
    sampled = len(video.frame_times) if video.frame_times is not None else None
    info = {
        "kind": "video",
        "width": int(meta.width),
        "height": int(meta.height),
        "grid": list(video.grid),
        "fps": video.fps,
        "duration": float(meta.duration),
        "num_frames": int(meta.num_frames),
        "sampled_frames": sampled,
    }
    if video.audio is not None:
        info["audio_mel_frames"] = video.audio.mel_frames
    return LoadedFile(video, info)


def load_audio_file(
    stored: StoredFile, item: FileItem, model: str, rules: LayoutRules, settings: Settings
) -> LoadedFile:
    """Container metadata -> duration cap (``MROPE_MAX_VIDEO_SECONDS``) -> :func:`mrope.media.load_audio`
    (omni models only)."""
    if not rules.has_audio:
        raise MediaError(
            f"{_name(stored)} is an audio file (no video stream), but the {rules.name!r} rules have no audio; "
            "expected an image or a video, or an omni model such as 'qwen2.5-omni'"
        )
    meta = probe_audio(stored.path, max_packets=max(settings.max_video_frames, 1) * 64)
    name = _name(stored)
    check_audio_meta(meta, settings, name)
    audio = load_audio(meta, model=model, rules=rules, wrap=item.wrap)
    info = {
        "kind": "audio",
        "duration": float(meta.duration),
        "sample_rate": int(meta.sample_rate),
        "mel_frames": audio.mel_frames,
    }
    return LoadedFile(audio, info)


def load_file(
    stored: StoredFile,
    item: FileItem,
    model: str,
    rules: LayoutRules,
    settings: Settings,
    deadline: float | None = None,
) -> LoadedFile:
    """Kind, caps and segment of one file (blocking: call it in a worker thread).

    Library errors keep their type (their handler makes them 422s) with the temp path replaced by the
    file's upload name. Any other exception from a media decoder on client bytes becomes a 422
    ``invalid_media`` here, so hostile input cannot cause a 500.
    """
    name = _name(stored)
    try:
        kind, meta = detect_kind(stored, settings, deadline)
        if kind == "image":
            loaded = load_image_file(stored, item, model, rules, settings)
        elif kind == "audio":
            loaded = load_audio_file(stored, item, model, rules, settings)
        else:
            loaded = load_video_file(stored, item, model, rules, settings, meta, deadline)
    except (ServiceError, ProbeDeadlineError):
        raise
    except MRopeError as exc:
        raise type(exc)(_rename(str(exc), stored)) from None
    except Exception as exc:  # noqa: BLE001 - decoders raise many types on bad bytes
        if os.path.exists(stored.path):  # else the request timed out and its spool is gone: nobody waits
            log.warning("media reader raised %s on %s: %s", type(exc).__name__, name, log_text(str(exc), 500))
        raise ServiceError(
            422, "invalid_media", f"{name} cannot be read: {type(exc).__name__}: {exc}"[:500]
        ) from None
    info = {"index": stored.index, "filename": stored.filename, "bytes": stored.size, **loaded.info}
    return LoadedFile(loaded.segment, info)


def _rename(message: str, stored: StoredFile) -> str:
    """A library message about the temp file (or its sniffed head, ``<N bytes>``) in terms of the upload."""
    name = _name(stored)
    message = _BYTES_NAME.sub(name, message.replace(repr(stored.path), name).replace(stored.path, name))
    return message if name in message else f"{name}: {message}"


class MediaSlots:
    """At most ``n`` media readers at once, counted from the thread itself: a reader the request gave
    up on (timed out) keeps its slot until it really stops, so abandoned work can never pile up past
    ``MROPE_MEDIA_THREADS``."""

    def __init__(self, n: int, busy: Gauge | None = None) -> None:
        self.n = n
        self._slots = threading.BoundedSemaphore(n)
        self._busy = busy

    def run(self, fn: Callable[[float], T], deadline: float) -> T | None:
        """``fn(deadline)`` once a slot is free; ``None`` when none frees up before ``deadline``
        (``time.monotonic()``)."""
        if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return None
        if self._busy is not None:
            self._busy.inc()
        try:
            return fn(deadline)
        finally:
            if self._busy is not None:
                self._busy.dec()
            self._slots.release()


def _timeout(what: str, timeout_s: float) -> ServiceError:
    return ServiceError(
        422,
        "media_timeout",
        f"reading {what} took longer than {timeout_s:g} s (MROPE_MEDIA_TIMEOUT_S)",
        cap="MROPE_MEDIA_TIMEOUT_S",
        limit=timeout_s,
    )


async def run_bounded(fn: Callable[[float], T], slots: MediaSlots, timeout_s: float, what: str) -> T:
    """Run blocking ``fn(deadline)`` in a worker thread holding one of ``slots``; 422 after ``timeout_s``
    (waiting for a slot included).

    A thread cannot be killed: on timeout the request answers at once, the thread is abandoned and
    keeps its slot until it returns. ``fn`` gets the deadline (``time.monotonic()``) and stops its
    own long loops there (:func:`mrope.media.probe_video` counts packets against it), so the work
    ends soon after the answer.
    """
    deadline = time.monotonic() + timeout_s
    try:
        with anyio.fail_after(timeout_s):
            result = await anyio.to_thread.run_sync(slots.run, fn, deadline, abandon_on_cancel=True)
    except TimeoutError:
        raise _timeout(what, timeout_s) from None
    except ProbeDeadlineError:
        raise _timeout(what, timeout_s) from None
    if result is None:
        raise _timeout(what, timeout_s)
    return result


async def load_files(
    files: list[StoredFile],
    items: list[FileItem],
    model: str,
    rules: LayoutRules,
    settings: Settings,
    slots: MediaSlots,
    seconds: Histogram | None = None,
) -> list[LoadedFile]:
    """The loaded file of every placement in ``items``, in order (one load per distinct placement).

    Files of one request load one after the other, so the first bad file in layout order is the one
    reported; different requests load in parallel.
    """
    done: dict[tuple[Any, ...], LoadedFile] = {}
    out = []
    for item in items:
        key = (item.index, item.wrap, item.fps, item.nframes, item.use_audio_in_video)
        if key not in done:
            stored = files[item.index]
            fn = functools.partial(load_file, stored, item, model, rules, settings)
            start = time.perf_counter()
            kind = "failed"
            try:
                done[key] = await run_bounded(fn, slots, settings.media_timeout_s, _name(stored))
                kind = done[key].info["kind"]
            finally:
                if seconds is not None:
                    seconds.labels(kind).observe(time.perf_counter() - start)
        out.append(done[key])
    return out
