"""Uploaded files -> segments: kind by content, size or metadata checked against the caps, then sized by
:mod:`mrope.media` (headers and container metadata only, never a full decode).

Each file is probed once (:class:`Probe`), whatever its placements. All file work runs in worker
threads (at most ``MROPE_MEDIA_THREADS`` at once, timed-out ones included until they stop:
:class:`MediaSlots`), under one deadline per request, ``MROPE_MEDIA_TIMEOUT_S`` (the request answers
then, and packet counting and Pillow's header reads stop at the same deadline), so a slow or hostile
file never stalls the event loop or other requests, and never leaves work running past the thread
budget.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from PIL import Image as PILImage
from prometheus_client import Gauge, Histogram

import mrope
from mrope._errors import MediaError, MRopeError
from mrope._route import Route
from mrope._rules import LayoutRules
from mrope.media import (
    detect_media_kind,
    image_grid,
    image_size,
    load_audio,
    load_video,
    probe_video,
    sizing_sources,
)
from mrope.media._audio import has_audio_stream
from mrope.media._deadline import DeadlineReader, ProbeDeadlineError
from mrope.media._detect import NOT_PICTURE_FORMATS
from mrope.media._image import DEFAULT_MAX_IMAGE_PIXELS
from mrope.media._sources import media_record
from mrope.models._registry import get_route
from mrope.models._routes import DEFAULT_ROUTE, ROUTES
from mrope.schema._request import FileItem

from ._convert import (
    check_audio_meta,
    check_image_pixels,
    check_nframes,
    check_video_meta,
    probe_track,
)
from ._errors import ServiceError
from ._logtext import log_text
from ._settings import Settings
from ._token_caps import check_tokens, token_floor
from ._uploads import StoredFile

log = logging.getLogger("mrope.service")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SNIFF_BYTES = 64 * 1024
"""Bytes read from the start of a file to tell an image from a video."""

T = TypeVar("T")
_BYTES_NAME = re.compile(r"<\d+ bytes>")


@dataclass(frozen=True)
class LoadedFile:
    """A file placed in the sequence: its segment, what the service learned about it, and its probe."""

    segment: mrope.Image | mrope.Video | mrope.Audio
    info: dict[str, Any]
    probe: Probe | None = None


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
    if pil_identifies(stored.path, deadline):  # an image header longer than the head (a 100 KB ICC profile)
        return "image", None
    try:
        return "video", probe_video(stored.path, max_packets=settings.max_video_frames + 1, deadline=deadline)
    except ProbeDeadlineError:
        raise
    except MediaError as exc:
        raise MediaError(f"{_name(stored)} is neither a readable image nor a readable video: {exc}") from None


def pil_identifies(path: str, deadline: float | None = None) -> bool:
    """Whether PIL reads ``path``'s header as a picture (headers only: PIL reads pixels lazily).

    An image whose declared size trips PIL's bomb guard counts: its size is refused with a clear error
    by the pixel cap afterwards; so does a PNG signature (:func:`mrope.media.image_size` bounds its
    chunks). PIL reads through a :class:`~mrope.media._deadline.DeadlineReader`: it stops at ``deadline``.
    """
    with open(path, "rb") as fh:
        if fh.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE:
            return True
        fh.seek(0)
        f = fh if deadline is None else DeadlineReader(fh, deadline, "the upload")
        try:
            with PILImage.open(f) as im:  # type: ignore[arg-type]
                return im.format not in NOT_PICTURE_FORMATS
        except ProbeDeadlineError:
            raise
        except PILImage.DecompressionBombError:
            return True
        except Exception:  # noqa: BLE001 - PIL raises many types on bytes that are not an image
            return False


@dataclass(frozen=True)
class Probe:
    """What one uploaded file is, read once for all its placements: its kind and its header facts
    (``(height, width)`` of an image as ``route``'s image loader reads it, the
    :class:`~mrope.media.VideoInfo` or :class:`~mrope.media.AudioInfo` of a video or an audio file),
    already checked against the caps."""

    kind: str
    meta: Any
    route: Route = ROUTES[DEFAULT_ROUTE]


def probe_file(
    stored: StoredFile,
    rules: LayoutRules,
    settings: Settings,
    deadline: float | None = None,
    route: str | None = None,
) -> Probe:
    """Kind, header and caps of one file (blocking; every reader stops at ``deadline``), an image's size
    as ``route``'s loader reads it (:mod:`mrope.models._routes`)."""
    way = get_route(route)
    name = _name(stored)
    kind, meta = detect_kind(stored, settings, deadline)
    if kind == "image":
        # the library's own bomb guard still applies; the service's cap is checked here so that its
        # error names MROPE_MAX_IMAGE_PIXELS
        meta = image_size(
            stored.path,
            max_pixels=max(settings.max_image_pixels, DEFAULT_MAX_IMAGE_PIXELS),
            deadline=deadline,
            exif_transpose=way.exif_transpose,
        )
        check_image_pixels(meta[0], meta[1], settings, name)
    elif kind == "audio":
        if not rules.has_audio:
            raise MediaError(
                f"{name} is an audio file (no video stream), but the {rules.name!r} rules have no audio; "
                "expected an image or a video, or an omni model such as 'qwen2.5-omni'"
            )
        meta = probe_track(stored.path, settings, deadline)
        check_audio_meta(meta, settings, name)
    else:
        if meta is None:
            meta = probe_video(stored.path, max_packets=settings.max_video_frames + 1, deadline=deadline)
        check_video_meta(meta, settings, name)
    return Probe(kind, meta, way)


def load_file(
    stored: StoredFile,
    item: FileItem,
    model: str,
    rules: LayoutRules,
    settings: Settings,
    deadline: float | None = None,
    route: str | None = None,
) -> LoadedFile:
    """Probe one file and place it once (blocking: call it in a worker thread); the result carries
    the :class:`Probe` for the file's other placements (:func:`place`)."""
    with _translated(stored):
        probe = probe_file(stored, rules, settings, deadline, route)
    return dataclasses.replace(place(stored, probe, item, model, rules, settings, deadline), probe=probe)


def place(
    stored: StoredFile,
    probe: Probe,
    item: FileItem,
    model: str,
    rules: LayoutRules,
    settings: Settings,
    deadline: float | None = None,
) -> LoadedFile:
    """The segment of one placement of a probed file, with the upload's facts in ``info`` and errors in
    terms of the upload: arithmetic on its header facts (a video's own audio track is the one thing
    read again, for ``use_audio_in_video``, stopping at ``deadline``)."""
    with _translated(stored):
        track = functools.partial(_track, stored, settings, deadline)
        loaded = _segment(probe, item, model, rules, stored, track)
    info = {"index": stored.index, "filename": stored.filename, "bytes": stored.size, **loaded.info}
    return LoadedFile(loaded.segment, info, probe)


def _track(stored: StoredFile, settings: Settings, deadline: float | None) -> Any:
    """The AudioInfo of a video upload's own audio track, or ``None`` without one."""
    return probe_track(stored.path, settings, deadline) if has_audio_stream(stored.path) else None


def _segment(
    probe: Probe, item: FileItem, model: str, rules: LayoutRules, stored: StoredFile, track: Callable[[], Any]
) -> LoadedFile:
    """The segment of one placement and what the service learned about it (``stored``: the file, read
    again by a route with its own video loader; ``track()``: the video's own audio track, read for
    ``use_audio_in_video`` only)."""
    meta = probe.meta
    if probe.kind == "image":
        height, width = meta
        grid = image_grid(height, width, rules=rules)
        sized = _sized(grid, rules)
        record = media_record("image", model, rules.name, probe.route, {}, sized["resized"], 1)
        image = mrope.Image(grid=grid, wrap=item.wrap, record=record)
        info = {"kind": "image", "route": probe.route.name, "width": width, "height": height}
        return LoadedFile(image, {**info, **sized, "sources": dict(record.sources)})
    if probe.kind == "audio":
        audio = load_audio(meta, model=model, rules=rules, wrap=item.wrap)
        info = {
            "kind": "audio",
            "duration": float(meta.duration),
            "sample_rate": int(meta.sample_rate),
            "mel_frames": audio.mel_frames,
        }
        return LoadedFile(audio, info)
    # a route with its own loader (qwen-vl-utils: decord) counts the stream itself: the stored file again
    check_nframes(item.nframes, meta, rules, _name(stored))
    source = meta if probe.route.video_reader is None else stored.path
    counts = {"fps": item.fps, "nframes": item.nframes}
    video = load_video(source, model=model, rules=rules, wrap=item.wrap, route=probe.route, **counts)
    audio_track = track() if item.use_audio_in_video else None  # omni models: the video's own track
    if audio_track is not None:
        video = dataclasses.replace(video, audio=load_audio(audio_track, model=model, rules=rules))
    sampled = len(video.frame_times) if video.frame_times is not None else None
    info = {
        "kind": "video",
        "route": probe.route.name,
        "width": int(meta.width),
        "height": int(meta.height),
        "rotation": int(meta.rotation),
        "native_fps": float(meta.fps),
        **_sized(video.grid, rules),
        "fps": video.fps,
        "duration": float(meta.duration),
        "num_frames": int(meta.num_frames),
        "sampled_frames": sampled,
        "sources": sizing_sources(
            "video", model, route=probe.route, keys=[] if item.fps is None else ["fps"]
        ),
    }
    if video.audio is not None:
        info["audio_mel_frames"] = video.audio.mel_frames
    return LoadedFile(video, info)


def _sized(grid: tuple[int, ...], rules: LayoutRules) -> dict[str, Any]:
    """The encoder ``grid`` [t, h, w] (patches) and the ``resized`` [height, width] (pixels) it was cut from."""
    return {"grid": list(grid), "resized": [grid[1] * rules.patch_size, grid[2] * rules.patch_size]}


@contextlib.contextmanager
def _translated(stored: StoredFile) -> Iterator[None]:
    """Inside: library errors renamed for the upload and any other exception from a media decoder
    on client bytes turned into a 422 ``invalid_media``, so hostile input cannot cause a 500. Library
    errors keep their type (their handler makes them 422s) with the temp path replaced by the file's
    upload name."""
    name = _name(stored)
    try:
        yield
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


async def run_bounded(
    fn: Callable[[float], T], slots: MediaSlots, timeout_s: float, what: str, deadline: float | None = None
) -> T:
    """Run blocking ``fn(deadline)`` in a worker thread holding one of ``slots``; 422 after ``timeout_s``
    (waiting for a slot included), or at ``deadline`` (``time.monotonic()``) when given: one deadline
    for all the work of a request.

    A thread cannot be killed: on timeout the request answers at once, the thread is abandoned and
    keeps its slot until it returns. ``fn`` gets the deadline (``time.monotonic()``) and stops its
    own long loops there (:func:`mrope.media.probe_video` counts packets against it), so the work
    ends soon after the answer.
    """
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    left = deadline - time.monotonic()
    if left <= 0:
        raise _timeout(what, timeout_s)
    try:
        with anyio.fail_after(left):
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
    route: str | None = None,
) -> list[LoadedFile]:
    """The loaded file of every placement in ``items``, in order.

    Each file is probed once (:func:`load_file`, in a media slot; ``seconds`` observes each probe), its
    other placements are sized from that probe; all of it runs under one deadline,
    ``MROPE_MEDIA_TIMEOUT_S`` from the first probe, and the token cap is checked after every new
    placement (by the integer floor of :func:`mrope.service._token_caps.token_floor`), so a layout that
    places one file thousands of times is refused as soon as it passes. Files of one request load one
    after the other, so the first bad file in layout order is the one reported; different requests
    load in parallel. ``route`` names whose loader reads the images (:mod:`mrope.models._routes`).
    """
    deadline = time.monotonic() + settings.media_timeout_s
    done: dict[tuple[Any, ...], LoadedFile] = {}
    probes: dict[int, Probe] = {}
    out = []
    floor = 0
    placements = collections.Counter(_key(item) for item in items)
    for item in items:
        key = _key(item)
        loaded = done.get(key)
        if loaded is None:
            stored = files[item.index]
            probe = probes.get(item.index)
            if probe is None:
                fn = functools.partial(load_file, stored, item, model, rules, settings, route=route)
                start = time.perf_counter()
                kind = "failed"
                try:
                    loaded = await run_bounded(fn, slots, settings.media_timeout_s, _name(stored), deadline)
                    kind = loaded.info["kind"]
                finally:
                    if seconds is not None:
                        seconds.labels(kind).observe(time.perf_counter() - start)
                if loaded.probe is not None:
                    probes[item.index] = loaded.probe
            elif probe.kind == "video" and item.use_audio_in_video:  # reads the file again: in a slot
                fn = functools.partial(place, stored, probe, item, model, rules, settings)
                loaded = await run_bounded(fn, slots, settings.media_timeout_s, _name(stored), deadline)
            else:
                if time.monotonic() > deadline:
                    raise _timeout(_name(stored), settings.media_timeout_s)
                loaded = place(stored, probe, item, model, rules, settings)
            done[key] = loaded
            floor += token_floor([loaded.segment], rules) * placements[key]
            check_tokens(floor, settings, "the token count of the files' placements")
        out.append(loaded)
    return out


def _key(item: FileItem) -> tuple[Any, ...]:
    return (item.index, item.wrap, item.fps, item.nframes, item.use_audio_in_video)
