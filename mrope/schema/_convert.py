"""Validated segments and messages -> library segments (:class:`mrope.Text`, :class:`mrope.Image`, ...).

Coordinates are the builder's business, not this module's: a grid is passed on as given, a pixel size is
sized by :func:`mrope.media.image_grid`, a media path is read (as the face's :class:`MediaAccess` allows)
by :mod:`mrope.media`'s loaders.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._rules import LayoutRules
from mrope._segments import Audio, Image, Segment, Text, Video
from mrope.media import image_grid, load_audio, load_frames, load_image, load_video, probe_video
from mrope.media._decode_check import check_image_decodes, check_video_decodes
from mrope.models import ModelLike

from ._errors import RequestError
from ._forms import KeepMask
from ._image import IMAGE_FORMS, ImageGrid, ImagePath, ImageSize, TilingOptions
from ._media import MEDIA_NONE, MediaAccess
from ._records import MessageText
from ._request import AudioSegment, TextSegment
from ._text import tokenize
from ._video import VideoFrames, VideoGrid, VideoPath

ImageForm = ImageGrid | ImageSize | ImagePath
"""A validated image segment, in one of its forms."""
VideoForm = VideoGrid | VideoPath | VideoFrames
"""A validated video segment, in one of its forms."""
AnySegment = TextSegment | ImageForm | VideoForm | AudioSegment
"""A validated segment of any kind."""


def text_from(seg: TextSegment | MessageText, tokenizer: Any, where: str, limit: int | None = None) -> Text:
    """A :class:`mrope.Text` (a string is tokenized with ``tokenizer``, refused past ``limit`` tokens;
    without a tokenizer, an error)."""
    if seg.text is not None:
        return Text(tokenize(tokenizer, seg.text, where, limit))
    if getattr(seg, "ids", None) is not None:
        return Text(seg.ids)  # type: ignore[union-attr]
    return Text(int(seg.tokens or 0))


def keep_mask(mask: KeepMask, segment: Image | Video, where: str) -> np.ndarray:
    """A ``keep`` mask decoded, once its length is known to be within the segment's bound: at most two
    tokens per encoder patch (a newline column, two border tokens) plus two, so decoding never costs
    more than the unpruned segment's tokens; the library checks the exact length when it builds."""
    thumbnails = segment.grid[0] * math.prod(segment.thumbnail_grid) if segment.thumbnail_grid else 0
    patches = math.prod(segment.grid) + thumbnails  # a sliced video has a thumbnail a frame
    if mask.size > 2 * patches + 2:
        raise RequestError(
            f"{where}: keep covers {mask.size} tokens; the segment (grid {list(segment.grid)}) has at most "
            f"{2 * patches + 2}"
        )
    if mask.runs is not None:
        return np.repeat(np.arange(len(mask.runs)) % 2 == 0, mask.runs)
    try:
        packed = base64.b64decode(mask.bits or "", validate=True)
    except binascii.Error:
        raise RequestError(f"{where}: keep bits must be base64") from None
    if len(packed) != (mask.size + 7) // 8:
        raise RequestError(
            f"{where}: keep bits hold {len(packed)} bytes; length {mask.size} needs {(mask.size + 7) // 8}"
        )
    return np.unpackbits(np.frombuffer(packed, dtype=np.uint8), count=mask.size).astype(bool)


def _with_keep(segment: Any, mask: KeepMask | None, where: str) -> Any:
    return segment if mask is None else dataclasses.replace(segment, keep=keep_mask(mask, segment, where))


def image_from(
    seg: ImageForm,
    rules: LayoutRules,
    media: MediaAccess,
    where: str,
    route: str | None = None,
    model: ModelLike | None = None,
) -> Image:
    """A :class:`mrope.Image`: a grid as given, a size by the rules, a path read from its header as
    ``route``'s image loader reads it (:mod:`mrope.models._routes`; ``model``: the family or checkpoint
    its record names as the origin of the sizing values the rules hold)."""
    image = _image_from(seg, rules, media, where, route, model)
    return _with_keep(image, seg.keep, where)


def _image_from(
    seg: ImageForm,
    rules: LayoutRules,
    media: MediaAccess,
    where: str,
    route: str | None,
    model: ModelLike | None,
) -> Image:
    if isinstance(seg, ImagePath):
        source = media.resolve(seg.path, where)
        tiling = seg.tiling.model_dump() if isinstance(seg.tiling, TilingOptions) else seg.tiling
        return load_image(
            source, model, rules, tiling=tiling, crop=seg.crop, wrap=seg.wrap, route=route, **sizing(seg)
        )
    if isinstance(seg, ImageGrid):
        grid = tuple(seg.grid)
    else:
        keys = sizing(seg)
        if "resized" in keys:  # qwen-vl-utils: the given size under the family's own bounds
            grid = image_grid(*keys["resized"], rules=rules)
        elif keys:
            bounds = dataclasses.replace(
                rules,
                image_min_pixels=keys.get("min_pixels", rules.image_min_pixels),
                image_max_pixels=keys.get("max_pixels", rules.image_max_pixels),
            )
            grid = image_grid(seg.height, seg.width, rules=bounds)
        else:
            grid = image_grid(seg.height, seg.width, rules=rules)
    return Image(
        grid=grid,  # type: ignore[arg-type]
        tiles=tuple(seg.tiles) if seg.tiles is not None else None,  # type: ignore[arg-type]
        thumbnail=bool(seg.thumbnail),
        tile_order=tuple(seg.tile_order) if seg.tile_order is not None else None,
        origin=tuple(seg.origin) if seg.origin is not None else (0, 0),  # type: ignore[arg-type]
        wrap=seg.wrap,
        generate=seg.generate,
        thumbnail_grid=tuple(seg.thumbnail_grid) if seg.thumbnail_grid is not None else None,  # type: ignore[arg-type]
    )


def sizing(seg: ImageSize | ImagePath | VideoPath | VideoFrames) -> dict[str, Any]:
    """The qwen-vl-utils keys a segment sets, as :func:`mrope.media.load_image` / :func:`load_video` /
    :func:`load_frames` take them (``resized_height`` + ``resized_width`` -> ``resized``)."""
    keys = {
        k: getattr(seg, k)
        for k in ("min_pixels", "max_pixels", "total_pixels", "video_start", "video_end")
        if getattr(seg, k, None) is not None
    }
    if seg.resized_height is not None and seg.resized_width is not None:
        keys["resized"] = (seg.resized_height, seg.resized_width)
    return keys


def video_from(
    seg: VideoForm,
    rules: LayoutRules,
    media: MediaAccess,
    where: str,
    frame_size: str | None = None,
    route: str | None = None,
    model: ModelLike | None = None,
) -> Video:
    """A :class:`mrope.Video`: a grid as given, a path sampled from its metadata, frames sized from their
    headers (``frame_size``: which frames of a path the model gets, see :func:`mrope.media.load_video`;
    ``route``: whose pipeline sizes a frame list, see :func:`mrope.media.load_frames`)."""
    video = _video_from(seg, rules, media, where, frame_size, route, model)
    return _with_keep(video, seg.keep, where)


def _video_from(
    seg: VideoForm,
    rules: LayoutRules,
    media: MediaAccess,
    where: str,
    frame_size: str | None,
    route: str | None,
    model: ModelLike | None,
) -> Video:
    if isinstance(seg, VideoFrames):
        sources = [media.resolve(f, f"{where} frame {i}") for i, f in enumerate(seg.frames)]
        rate = {"fps": seg.fps, "sample_fps": seg.sample_fps}
        return load_frames(sources, model, rules, wrap=seg.wrap, route=route, **rate, **sizing(seg))
    if isinstance(seg, VideoPath):
        source = media.resolve(seg.path, where)
        counts = {
            k: getattr(seg, k) for k in ("nframes", "min_frames", "max_frames") if getattr(seg, k) is not None
        }
        return load_video(
            source,
            model,
            rules,
            fps=seg.fps,
            wrap=seg.wrap,
            use_audio_in_video=bool(seg.use_audio_in_video),
            frame_size=frame_size,  # type: ignore[arg-type]
            route=route,
            **counts,
            **sizing(seg),
        )
    audio = seg.audio
    return Video(
        grid=tuple(seg.grid),  # type: ignore[arg-type]
        fps=seg.fps,
        second_per_grid=seg.second_per_grid,
        frame_times=tuple(seg.frame_times) if seg.frame_times is not None else None,
        wrap=seg.wrap,
        audio=None
        if audio is None
        else Audio(audio.tokens, seconds=audio.seconds, mel_frames=audio.mel_frames),
        tiles=tuple(seg.tiles) if seg.tiles is not None else None,  # type: ignore[arg-type]
        thumbnail_grid=tuple(seg.thumbnail_grid) if seg.thumbnail_grid is not None else None,  # type: ignore[arg-type]
    )


def audio_from(seg: AudioSegment, rules: LayoutRules, media: MediaAccess, where: str) -> Audio:
    """A :class:`mrope.Audio`: a length as given, a path read from its container (omni models)."""
    if seg.path is not None:
        return load_audio(media.resolve(seg.path, where), rules=rules, wrap=seg.wrap)
    return Audio(seg.tokens, seconds=seg.seconds, mel_frames=seg.mel_frames, wrap=seg.wrap)


class SegmentReader:
    """Validated segments -> library segments for one request: its rules, the face's tokenizer, and what
    media the face reads.

    ``model``: the family (or :func:`mrope.from_pretrained`'s checkpoint) each media record names as the
    origin of the sizing values the rules hold; ``None``: the rules'.
    ``token_limit``: text (segments and messages) is refused past this many tokens while it is counted
    (:class:`mrope.schema._text.TooManyTextTokens`). A face with checks of its own (the service: caps on
    pixels and durations, URLs opened without redirects) subclasses it and overrides :meth:`text`, :meth:`image`, :meth:`video` or :meth:`audio`;
    the dispatch on ``type`` and the places named in errors stay here.
    """

    __slots__ = ("decode_check", "frame_size", "media", "model", "route", "rules", "token_limit", "tokenizer")

    def __init__(
        self,
        rules: LayoutRules,
        *,
        tokenizer: Any = None,
        media: MediaAccess = MEDIA_NONE,
        frame_size: str | None = None,
        decode_check: bool = False,
        route: str | None = None,
        token_limit: int | None = None,
        model: ModelLike | None = None,
    ) -> None:
        self.rules = rules
        self.model = model
        self.route = route
        self.tokenizer = tokenizer
        self.token_limit = token_limit
        self.media = media
        self.frame_size = frame_size
        self.decode_check = decode_check

    def text(self, seg: TextSegment, where: str) -> Text:
        return text_from(seg, self.tokenizer, where, self.token_limit)

    def image(self, seg: ImageForm, where: str) -> Image:
        image = image_from(seg, self.rules, self.media, where, self.route, self.model)
        if self.decode_check and isinstance(seg, ImagePath):
            check_image_decodes(self.media.resolve(seg.path, where), where)
        return image

    def video(self, seg: VideoForm, where: str) -> Video:
        frame_size = (seg.frame_size if isinstance(seg, VideoPath) else None) or self.frame_size
        video = video_from(seg, self.rules, self.media, where, frame_size, self.route, self.model)
        if self.decode_check and isinstance(seg, VideoFrames):
            for i, frame in enumerate(seg.frames):
                check_image_decodes(self.media.resolve(frame, where), f"{where} frame {i}")
        elif self.decode_check and isinstance(seg, VideoPath):
            source = self.media.resolve(seg.path, where)
            last = probe_video(source).num_frames - 1
            check_video_decodes(source, [0, last], where)
        return video

    def audio(self, seg: AudioSegment, where: str) -> Audio:
        return audio_from(seg, self.rules, self.media, where)

    def segment(self, seg: AnySegment, where: str) -> Segment:
        """One validated segment -> :class:`mrope.Text` / :class:`mrope.Image` / :class:`mrope.Video` /
        :class:`mrope.Audio`."""
        if isinstance(seg, TextSegment):
            return self.text(seg, where)
        if isinstance(seg, IMAGE_FORMS):
            return self.image(seg, where)
        if isinstance(seg, AudioSegment):
            return self.audio(seg, where)
        return self.video(seg, where)

    def segments(self, items: Sequence[AnySegment]) -> list[Segment]:
        """Validated segments -> library segments, in order (``segment i`` in errors)."""
        return [self.segment(seg, f"segment {i}") for i, seg in enumerate(items)]


def to_segments(
    items: Sequence[AnySegment],
    rules: LayoutRules,
    *,
    tokenizer: Any = None,
    media: MediaAccess = MEDIA_NONE,
) -> list[Segment]:
    """Validated segments -> library segments, in order (media read as ``media`` allows)."""
    return SegmentReader(rules, tokenizer=tokenizer, media=media).segments(items)
