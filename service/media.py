"""Uploaded files -> segments: kind by content, size or metadata checked against the caps, then sized by
:mod:`mrope.vision` (headers and container metadata only, never a full decode).

All file work runs in worker threads (at most ``MROPE_MEDIA_THREADS`` at once), each bounded by
``MROPE_MEDIA_TIMEOUT_S``, so a slow or hostile file never stalls the event loop or other requests.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread

import mrope
from mrope.errors import MRopeError
from mrope.rules import LayoutRules
from service.convert import check_image_pixels
from service.errors import ServiceError, over_cap
from service.models import FileItem
from service.settings import Settings
from service.uploads import StoredFile

log = logging.getLogger("mrope.service")

SNIFF_BYTES = 64 * 1024
"""Bytes read from the start of a file to tell an image from a video."""

T = TypeVar("T")


@dataclass(frozen=True)
class LoadedFile:
    """A file placed in the sequence: its segment and what the service learned about it."""

    segment: mrope.Image | mrope.Video
    info: dict[str, Any]


def _name(stored: StoredFile) -> str:
    return f"file {stored.index}" + (f" ({stored.filename!r})" if stored.filename else "")


def detect_kind(stored: StoredFile) -> str:
    """``"image"`` or ``"video"`` from the file's leading bytes (its name and declared type are ignored)."""
    from mrope.vision import detect_media_kind

    if stored.size == 0:
        raise ServiceError(422, "invalid_media", f"{_name(stored)} is empty")
    with open(stored.path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    return detect_media_kind(head)


def load_image_file(
    stored: StoredFile, item: FileItem, model: str, rules: LayoutRules, settings: Settings
) -> LoadedFile:
    from mrope.vision import image_size, load_image

    width, height = image_size(stored.path)
    if width < 1 or height < 1:
        raise ServiceError(
            422, "invalid_media", f"{_name(stored)} is a {width}x{height} image: nothing to see"
        )
    check_image_pixels(height, width, settings, _name(stored))
    image = load_image(stored.path, model=model, rules=rules, wrap=item.wrap)
    info = {"kind": "image", "width": width, "height": height, "grid": list(image.grid)}
    return LoadedFile(image, info)


def load_video_file(
    stored: StoredFile, item: FileItem, model: str, rules: LayoutRules, settings: Settings
) -> LoadedFile:
    from mrope.vision import load_video, probe_video

    meta = probe_video(stored.path)
    name = _name(stored)
    check_image_pixels(meta.height, meta.width, settings, f"the frames of {name}")
    duration = float(meta.duration) if meta.duration else None
    if duration is not None and duration > settings.max_video_seconds:
        raise over_cap(
            "video_too_long",
            f"the duration in seconds of {name}",
            duration,
            "MROPE_MAX_VIDEO_SECONDS",
            settings.max_video_seconds,
        )
    frames = int(meta.num_frames or 0)
    if not frames and duration is not None and meta.fps:
        frames = int(round(duration * float(meta.fps)))
    if frames > settings.max_video_frames:
        raise over_cap(
            "video_too_many_frames",
            f"the frame count of {name}",
            frames,
            "MROPE_MAX_VIDEO_FRAMES",
            settings.max_video_frames,
        )
    video = load_video(
        stored.path, model=model, rules=rules, fps=item.fps, nframes=item.nframes, wrap=item.wrap
    )
    sampled = (
        len(video.frame_times) if video.frame_times is not None else video.grid[0] * rules.temporal_patch_size
    )
    info = {
        "kind": "video",
        "width": int(meta.width),
        "height": int(meta.height),
        "grid": list(video.grid),
        "fps": video.fps,
        "duration": duration,
        "num_frames": int(meta.num_frames) if meta.num_frames else None,
        "sampled_frames": sampled,
    }
    return LoadedFile(video, info)


def load_file(
    stored: StoredFile, item: FileItem, model: str, rules: LayoutRules, settings: Settings
) -> LoadedFile:
    """Kind, caps and segment of one file (blocking: call it in a worker thread).

    Library errors pass through (their handler makes them 422s). Any other exception from a media
    decoder on client bytes becomes a 422 ``invalid_media`` here, so hostile input cannot cause a 500.
    """
    try:
        kind = detect_kind(stored)
        loader = load_image_file if kind == "image" else load_video_file
        loaded = loader(stored, item, model, rules, settings)
    except (ServiceError, MRopeError):
        raise
    except Exception as exc:  # noqa: BLE001 - decoders raise many types on bad bytes
        log.warning("media reader raised %s on %s: %s", type(exc).__name__, _name(stored), exc)
        raise ServiceError(
            422, "invalid_media", f"{_name(stored)} cannot be read: {type(exc).__name__}: {exc}"[:500]
        ) from None
    info = {"index": stored.index, "filename": stored.filename, "bytes": stored.size, **loaded.info}
    return LoadedFile(loaded.segment, info)


async def run_bounded(fn: Callable[[], T], limiter: anyio.CapacityLimiter, timeout_s: float, what: str) -> T:
    """Run blocking ``fn`` in a worker thread, giving up (422) after ``timeout_s``.

    A thread cannot be killed: on timeout it is abandoned and finishes in the background, while the
    request answers at once.
    """
    try:
        with anyio.fail_after(timeout_s):
            return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True, limiter=limiter)
    except TimeoutError:
        raise ServiceError(
            422,
            "media_timeout",
            f"reading {what} took longer than {timeout_s:g} s (MROPE_MEDIA_TIMEOUT_S)",
            cap="MROPE_MEDIA_TIMEOUT_S",
            limit=timeout_s,
        ) from None


async def load_files(
    files: list[StoredFile],
    items: list[FileItem],
    model: str,
    rules: LayoutRules,
    settings: Settings,
    limiter: anyio.CapacityLimiter,
) -> list[LoadedFile]:
    """The loaded file of every placement in ``items``, in order (one load per distinct placement).

    Files of one request load one after the other, so the first bad file in layout order is the one
    reported; different requests load in parallel.
    """
    done: dict[tuple[Any, ...], LoadedFile] = {}
    out = []
    for item in items:
        key = (item.index, item.wrap, item.fps, item.nframes)
        if key not in done:
            stored = files[item.index]
            fn = functools.partial(load_file, stored, item, model, rules, settings)
            done[key] = await run_bounded(fn, limiter, settings.media_timeout_s, _name(stored))
        out.append(done[key])
    return out
