"""The service's caps on a request's segments: each read under the media, text and URL caps before any array.

Nothing here computes a coordinate: segments are :mod:`mrope.schema`'s and become library segments by
its :class:`~mrope.schema._convert.SegmentReader`, which :class:`ServiceReader` puts under the caps (images
given by pixel size are sized by :func:`mrope.media.image_grid`; a media URL is read only from the hosts of
``MROPE_MEDIA_URL_HOSTS``, a local path never). The token cap on what they make is
:mod:`mrope.service._token_caps`'.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import mrope
from mrope import schema
from mrope._audio_grid import require_audio
from mrope._caches import cached
from mrope._chat import find_chat_template
from mrope._rules import LayoutRules
from mrope.media import (
    get_route,
    image_size,
    load_audio,
    load_frames,
    load_image,
    load_video,
    open_url,
    probe_audio,
    probe_video,
)
from mrope.media._audio import has_audio_stream
from mrope.media._image import DEFAULT_MAX_IMAGE_PIXELS
from mrope.schema import (
    AudioSegment,
    ImagePath,
    ImageSize,
    MediaAccess,
    TextSegment,
    TilingOptions,
    VideoFrames,
    VideoPath,
)
from mrope.schema._convert import AnySegment, ImageForm, SegmentReader, VideoForm, keep_mask, sizing
from mrope.schema._messages import template_segments, turn_segments
from mrope.schema._text import TokenizerRequired, TooManyTextTokens

from ._errors import ServiceError, over_cap
from ._settings import Settings
from ._token_caps import check_tokens


def check_video_meta(meta: Any, settings: Settings, where: str) -> None:
    """A probed video's frame size, duration (s) and frame count against the service's caps: the one
    check for uploads and URL segments alike."""
    check_image_pixels(meta.height, meta.width, settings, f"the frames of {where}")
    if meta.duration > settings.max_video_seconds:
        raise over_cap(
            "video_too_long",
            f"the duration in seconds of {where}",
            round(float(meta.duration), 3),
            "MROPE_MAX_VIDEO_SECONDS",
            settings.max_video_seconds,
        )
    if meta.num_frames > settings.max_video_frames:
        raise over_cap(
            "video_too_many_frames",
            f"the frame count of {where}",
            meta.num_frames,
            "MROPE_MAX_VIDEO_FRAMES",
            settings.max_video_frames,
        )


def check_audio_meta(meta: Any, settings: Settings, where: str) -> None:
    """A probed audio track's duration (s) against ``MROPE_MAX_VIDEO_SECONDS``."""
    if meta.duration > settings.max_video_seconds:
        raise over_cap(
            "audio_too_long",
            f"the duration in seconds of {where}",
            round(float(meta.duration), 3),
            "MROPE_MAX_VIDEO_SECONDS",
            settings.max_video_seconds,
        )


def check_image_pixels(height: int, width: int, settings: Settings, where: str) -> None:
    pixels = int(height) * int(width)
    if pixels > settings.max_image_pixels:
        raise over_cap(
            "image_too_large",
            f"the pixel count of {where} ({width}x{height})",
            pixels,
            "MROPE_MAX_IMAGE_PIXELS",
            settings.max_image_pixels,
        )


TEXT_CHARS_PER_TOKEN = 32
"""A text of more characters than this per token of ``MROPE_MAX_TOKENS`` is refused before it is
tokenized (real tokenizers average 3 to 5 characters a token)."""


def check_text_size(chars: int, settings: Settings, where: str) -> None:
    """413 for text of more than :data:`TEXT_CHARS_PER_TOKEN` characters per token of the cap."""
    most = TEXT_CHARS_PER_TOKEN * settings.max_tokens
    if chars > most:
        raise ServiceError(
            413,
            "text_too_long",
            f"{where} is {chars:,} characters long, over the {most:,} allowed ({TEXT_CHARS_PER_TOKEN} "
            "per token of MROPE_MAX_TOKENS)",
            cap="MROPE_MAX_TOKENS",
            limit=settings.max_tokens,
        )


def text_over_cap(exc: TooManyTextTokens, settings: Settings) -> ServiceError:
    """The 413 for text whose count passed ``MROPE_MAX_TOKENS`` while it was tokenized."""
    return over_cap(
        "too_many_tokens",
        f"the token count of {exc.where} (counted so far)",
        exc.counted,
        "MROPE_MAX_TOKENS",
        settings.max_tokens,
    )


def check_keep(seg: Any, settings: Settings, where: str) -> None:
    """A segment's ``keep`` mask weighed before it is decoded: the tokens it covers (the sum of its runs,
    or its length) against ``MROPE_MAX_TOKENS`` (the schema bounds them by the segment's grid as well;
    the grid's own tokens are counted with the request's)."""
    mask = getattr(seg, "keep", None)
    if mask is not None:
        check_tokens(mask.size, settings, f"the tokens the keep mask of {where} covers")


def check_nframes(nframes: int | None, meta: Any, rules: LayoutRules, where: str) -> None:
    """422 when ``nframes`` asks for more frames than the probed video has (or, for a shorter video,
    than one temporal patch): checked before any frame index is made."""
    if nframes is None:
        return
    most = max(int(meta.num_frames), rules.temporal_patch_size)
    if nframes > most:
        raise ServiceError(
            422,
            "too_many_frames",
            f"{where} asks for nframes={nframes:,}, but the video has {int(meta.num_frames):,} frames: "
            f"nframes may be at most {most:,}",
        )


def media_access(settings: Settings) -> MediaAccess:
    """The service never reads local files; URLs only from the hosts of ``MROPE_MEDIA_URL_HOSTS``."""
    hosts = settings.url_hosts
    return MediaAccess(local_files=False, urls=bool(hosts), url_hosts=hosts or None)


def allowed_url(path: str, settings: Settings, where: str) -> str:
    """``path`` when it is a URL of an allowlisted host (``MROPE_MEDIA_URL_HOSTS``), else a 422
    ``media_not_allowed`` (the string alone is read: nothing is opened)."""
    try:
        return media_access(settings).resolve(path, where)
    except schema.RequestError as exc:
        raise ServiceError(422, "media_not_allowed", str(exc), cap="MROPE_MEDIA_URL_HOSTS") from None


def check_urls(body: Any, settings: Settings) -> None:
    """Every media path and frame of a positions request (its segments or its message items) checked
    against the allowlist before a media slot is taken: a refused URL never waits for one. Items are
    named as the reader names them (``segment i``, ``message m item c``)."""
    if body.segments is not None:
        named = ((f"segment {i}", seg) for i, seg in enumerate(body.segments))
    else:
        named = ((f"message {m} item {c}", item) for m, c, item in _message_items(body))
    for where, seg in named:
        for k, path in enumerate(_paths(seg)):
            allowed_url(path, settings, where + (f" frame {k}" if isinstance(seg, VideoFrames) else ""))


def _message_items(body: Any) -> Iterator[tuple[int, int, Any]]:
    """``(m, c, item)`` for every content item of a request's messages (a string content holds none)."""
    for m, message in enumerate(body.messages or ()):
        if isinstance(message.content, list):
            for c, item in enumerate(message.content):
                yield m, c, item


def _paths(seg: Any) -> list[str]:
    if isinstance(seg, VideoFrames):
        return list(seg.frames)
    if isinstance(seg, (ImagePath, VideoPath)) or (isinstance(seg, AudioSegment) and seg.path is not None):
        return [seg.path]
    return []


def _open(path: str, settings: Settings, where: str, deadline: float | None) -> Any:
    """The allowlisted URL opened for bounded range reads that stop at ``deadline``: one plain http(s)
    URL (checked again by :func:`mrope.media.open_url` itself), redirects refused (a redirect could
    point anywhere)."""
    return open_url(allowed_url(path, settings, where), hosts=settings.url_hosts, deadline=deadline)


def probe_track(source: Any, settings: Settings, deadline: float | None) -> Any:
    """The :class:`~mrope.media.AudioInfo` of an audio track: at most 64 packets per
    ``MROPE_MAX_VIDEO_FRAMES`` demuxed, stopping at ``deadline`` (``time.monotonic()``)."""
    return probe_audio(source, max_packets=max(settings.max_video_frames, 1) * 64, deadline=deadline)


def audio_file(
    f: Any, rules: LayoutRules, settings: Settings, where: str, wrap: bool, deadline: float | None
) -> mrope.Audio:
    """An audio track read from its container, under the duration cap (``MROPE_MAX_VIDEO_SECONDS``)."""
    require_audio(rules, where)
    meta = probe_track(f, settings, deadline)
    check_audio_meta(meta, settings, where)
    return load_audio(meta, rules=rules, wrap=wrap)


def tokenizer_required(where: str) -> ServiceError:
    """The 422 for text sent to a service started without ``MROPE_TOKENIZER``."""
    return ServiceError(
        422,
        "tokenizer_required",
        f"{where} is text, which needs a tokenizer: start the service with MROPE_TOKENIZER set to a "
        "tokenizer.json, or send token counts / ids",
        cap="MROPE_TOKENIZER",
    )


class ServiceReader(SegmentReader):
    """The schema's segment reader under the service's caps: text needs ``MROPE_TOKENIZER``, a pixel size
    is checked against ``MROPE_MAX_IMAGE_PIXELS``, and a media URL (an allowlisted host only) is opened
    without redirects and probed under the size and duration caps before it is read, every read
    stopping at ``deadline`` (``time.monotonic()``)."""

    __slots__ = ("deadline", "settings")

    def __init__(
        self,
        rules: LayoutRules,
        settings: Settings,
        tokenizer: Any,
        deadline: float | None = None,
        route: str | None = None,
    ) -> None:
        super().__init__(rules, tokenizer=tokenizer, route=route, token_limit=settings.max_tokens)
        self.settings = settings
        self.deadline = deadline

    def text(self, seg: TextSegment, where: str) -> mrope.Text:
        if seg.text is not None:
            check_text_size(len(seg.text), self.settings, where)
        try:
            return super().text(seg, where)
        except TokenizerRequired:
            raise tokenizer_required(where) from None
        except TooManyTextTokens as exc:
            raise text_over_cap(exc, self.settings) from None

    def image(self, seg: ImageForm, where: str) -> mrope.Image:
        settings = self.settings
        check_keep(seg, settings, where)
        if not isinstance(seg, ImagePath):
            if isinstance(seg, ImageSize):
                check_image_pixels(seg.height, seg.width, settings, where)
            return super().image(seg, where)
        with _open(seg.path, settings, where, self.deadline) as f:
            self._check_size(f, where)
            tiling = seg.tiling.model_dump() if isinstance(seg.tiling, TilingOptions) else seg.tiling
            return load_image(
                f,
                rules=self.rules,
                tiling=tiling,
                crop=seg.crop,
                wrap=seg.wrap,
                route=self.route,
                **sizing(seg),
            )

    def _check_size(self, f: Any, where: str) -> None:
        """An opened picture's pixel count against ``MROPE_MAX_IMAGE_PIXELS`` (its header only)."""
        settings = self.settings
        cap = max(settings.max_image_pixels, DEFAULT_MAX_IMAGE_PIXELS)
        height, width = image_size(f, max_pixels=cap, deadline=self.deadline)
        check_image_pixels(height, width, settings, where)

    def frames(self, seg: VideoFrames, where: str) -> mrope.Video:
        """Frames given as URLs of allowlisted hosts, read like image paths (each under the pixel cap)."""
        with contextlib.ExitStack() as stack:
            files = []
            for i, frame in enumerate(seg.frames):
                f = stack.enter_context(_open(frame, self.settings, f"{where} frame {i}", self.deadline))
                self._check_size(f, f"{where} frame {i}")
                idle = getattr(getattr(f, "raw", None), "idle", None)  # (a data: URI has no connection)
                if idle is not None:
                    idle()  # one connection and one cached block at a time, however many frames
                files.append(f)
            rate = {"fps": seg.fps, "sample_fps": seg.sample_fps}
            video = load_frames(
                files, rules=self.rules, wrap=seg.wrap, route=self.route, **rate, **sizing(seg)
            )
        return (
            video if seg.keep is None else dataclasses.replace(video, keep=keep_mask(seg.keep, video, where))
        )

    def video(self, seg: VideoForm, where: str) -> mrope.Video:
        check_keep(seg, self.settings, where)
        if isinstance(seg, VideoFrames):
            return self.frames(seg, where)
        if not isinstance(seg, VideoPath):
            return super().video(seg, where)
        settings, rules = self.settings, self.rules
        with _open(seg.path, settings, where, self.deadline) as f:
            meta = probe_video(f, max_packets=settings.max_video_frames + 1, deadline=self.deadline)
        check_video_meta(meta, settings, where)
        check_nframes(seg.nframes, meta, rules, where)
        counts = {
            k: getattr(seg, k) for k in ("nframes", "min_frames", "max_frames") if getattr(seg, k) is not None
        }
        options = {
            "rules": rules,
            "fps": seg.fps,
            "wrap": seg.wrap,
            "frame_size": seg.frame_size,
            "route": self.route,
        }
        if get_route(self.route).video_reader is None:
            video = load_video(meta, **options, **counts, **sizing(seg))
        else:  # the route's loader counts the stream itself: the file again, under the caps it passed
            with _open(seg.path, settings, where, self.deadline) as f:
                video = load_video(f, **options, **counts, **sizing(seg))
        if seg.use_audio_in_video:  # omni models: the video's own audio track, from the same URL
            with _open(seg.path, settings, where, self.deadline) as f:
                if has_audio_stream(f):
                    audio = audio_file(f, rules, settings, where, True, self.deadline)
                    video = dataclasses.replace(video, audio=audio)
        return video

    def audio(self, seg: AudioSegment, where: str) -> mrope.Audio:
        if seg.path is None:
            return super().audio(seg, where)
        with _open(seg.path, self.settings, where, self.deadline) as f:
            return audio_file(f, self.rules, self.settings, where, seg.wrap, self.deadline)


def reads_media(items: Sequence[Any]) -> bool:
    """Whether any segment names a media file (read off the event loop, under the media timeout)."""
    return any(
        isinstance(seg, (ImagePath, VideoPath, VideoFrames))
        or (isinstance(seg, AudioSegment) and seg.path is not None)
        for seg in items
    )


def to_segments(
    items: Sequence[AnySegment],
    rules: LayoutRules,
    settings: Settings,
    tokenizer: Any,
    deadline: float | None = None,
    route: str | None = None,
) -> list[mrope.Text | mrope.Image | mrope.Video]:
    """Library segments for the JSON segments of a request, under the segment cap (:class:`ServiceReader`;
    media reads stop at ``deadline``, media read as ``route``'s pipeline reads them)."""
    check_segment_count(len(items), settings)
    return ServiceReader(rules, settings, tokenizer, deadline, route).segments(items)  # type: ignore[return-value]


@cached("service.chat_templates", maxsize=4)
def chat_template(tokenizer_path: str | None) -> str | None:
    """The chat template kept next to ``MROPE_TOKENIZER`` (:func:`mrope._chat.find_chat_template`)."""
    return find_chat_template(tokenizer_path) if tokenizer_path else None


def request_items(body: Any) -> list[Any]:
    """The segments of a positions request, or the items of its messages."""
    if body.segments is not None:
        return list(body.segments)
    return [item for _, _, item in _message_items(body)]


def request_segments(
    body: Any, rules: LayoutRules, settings: Settings, tokenizer: Any, deadline: float | None = None
) -> list[mrope.Text | mrope.Image | mrope.Video]:
    """Library segments of a positions request: its segments (:func:`to_segments`), or its messages read
    as ``mrope batch`` and the pipeline read them, under the same caps: rendered with the chat template
    next to ``MROPE_TOKENIZER`` when there is one and the request's ``chat_template`` is not ``"none"``
    (:func:`mrope.schema._messages.template_segments`), else the plain turns
    (:func:`mrope.schema._messages.turn_segments`). Media reads stop at ``deadline``."""
    if body.segments is not None:
        return to_segments(body.segments, rules, settings, tokenizer, deadline, body.route)
    items = request_items(body)
    check_segment_count(len(items), settings)
    chars = sum(len(getattr(item, "text", None) or "") for item in items)
    check_text_size(chars, settings, "the messages' text")
    reader = ServiceReader(rules, settings, tokenizer, deadline, body.route)
    template = None if body.chat_template == "none" else chat_template(settings.tokenizer)
    try:
        if template is not None:
            # a continued turn is rendered as the template renders it at the conversation's end
            continued = body.state is not None
            return template_segments(body.messages, reader, template, continued=continued).segments  # type: ignore[return-value]
        return turn_segments(body.messages, reader).segments  # type: ignore[return-value]
    except TokenizerRequired as exc:  # message text is read in runs, not by reader.text
        raise tokenizer_required(exc.where) from None
    except TooManyTextTokens as exc:
        raise text_over_cap(exc, settings) from None


def check_segment_count(n: int, settings: Settings) -> None:
    if n > settings.max_segments:
        raise over_cap(
            "too_many_segments", "the segment count", n, "MROPE_MAX_SEGMENTS", settings.max_segments
        )
