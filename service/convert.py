"""Request models -> library segments, and the cheap checks that run before any array is built.

Nothing here computes a coordinate: segments go to :func:`mrope.build_positions` unchanged, images given
by pixel size are sized by :func:`mrope.vision.image_grid`, and token counts come from
:func:`mrope.count_tokens` (behind an arithmetic floor), so the token cap is enforced before a huge
``[3, T]`` array is allocated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mrope
from mrope.rules import LayoutRules
from mrope.timeline import audio_tokens
from mrope.tokenizer import encode_text
from mrope.vision import image_grid
from service.errors import ServiceError, over_cap
from service.models import ImageSegment, TextSegment, VideoSegment
from service.settings import Settings


def tokenize(tokenizer: Any, text: str, where: str) -> list[int]:
    """Token ids of ``text`` with the configured tokenizer (no special tokens added)."""
    if tokenizer is None:
        raise ServiceError(
            422,
            "tokenizer_required",
            f"{where} is text, which needs a tokenizer: start the service with MROPE_TOKENIZER set to a "
            "tokenizer.json, or send token counts / ids",
            cap="MROPE_TOKENIZER",
        )
    return encode_text(tokenizer, text)


def text_segment(seg: TextSegment, tokenizer: Any, where: str) -> mrope.Text:
    if seg.text is not None:
        return mrope.Text(tokenize(tokenizer, seg.text, where))
    if seg.ids is not None:
        return mrope.Text(seg.ids)
    return mrope.Text(int(seg.tokens or 0))


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


def image_segment(seg: ImageSegment, rules: LayoutRules, settings: Settings, where: str) -> mrope.Image:
    if seg.grid is not None:
        grid = tuple(seg.grid)
    else:
        assert seg.height is not None and seg.width is not None  # the model validator guarantees it
        check_image_pixels(seg.height, seg.width, settings, where)
        grid = image_grid(seg.height, seg.width, rules=rules)
    return mrope.Image(
        grid=grid,  # type: ignore[arg-type]
        tiles=tuple(seg.tiles) if seg.tiles is not None else None,  # type: ignore[arg-type]
        thumbnail=seg.thumbnail,
        tile_order=tuple(seg.tile_order) if seg.tile_order is not None else None,
        origin=tuple(seg.origin),  # type: ignore[arg-type]
        wrap=seg.wrap,
    )


def video_segment(seg: VideoSegment) -> mrope.Video:
    return mrope.Video(
        grid=tuple(seg.grid),  # type: ignore[arg-type]
        fps=seg.fps,
        second_per_grid=seg.second_per_grid,
        frame_times=tuple(seg.frame_times) if seg.frame_times is not None else None,
        wrap=seg.wrap,
    )


def to_segments(
    items: Sequence[TextSegment | ImageSegment | VideoSegment],
    rules: LayoutRules,
    settings: Settings,
    tokenizer: Any,
) -> list[mrope.Text | mrope.Image | mrope.Video]:
    """Library segments for the JSON segments of a request (text is tokenized here when given as text)."""
    check_segment_count(len(items), settings)
    out: list[mrope.Text | mrope.Image | mrope.Video] = []
    for i, seg in enumerate(items):
        where = f"segment {i}"
        if isinstance(seg, TextSegment):
            out.append(text_segment(seg, tokenizer, where))
        elif isinstance(seg, ImageSegment):
            out.append(image_segment(seg, rules, settings, where))
        else:
            out.append(video_segment(seg))
    return out


def check_segment_count(n: int, settings: Settings) -> None:
    if n > settings.max_segments:
        raise over_cap(
            "too_many_segments", "the segment count", n, "MROPE_MAX_SEGMENTS", settings.max_segments
        )


def token_floor(segments: Sequence[mrope.Text | mrope.Image | mrope.Video], rules: LayoutRules) -> int:
    """Text tokens plus ``t * h * w / merge**2`` vision tokens per image and video: a lower bound of the
    sequence length from integer arithmetic alone.

    :func:`mrope.count_tokens` is exact; for a timestamped video with a tokenizer it tokenizes every
    temporal patch's time text, so a grid like ``[2**31 - 1, 2, 2]`` must be refused by this count first.
    """
    m2 = rules.merge_size * rules.merge_size
    total = 0
    for seg in segments:
        if isinstance(seg, mrope.Text):
            total += seg.num_tokens
        elif isinstance(seg, mrope.Audio):  # omni models: arithmetic (a LayoutError without audio rules)
            total += audio_tokens(seg, rules)
        else:
            t, h, w = seg.grid
            total += t * h * w // m2
            if isinstance(seg, mrope.Video) and seg.audio is not None:
                total += audio_tokens(seg.audio, rules)
    return total


INLINE_PATCHES = 512
"""Requests with more video temporal patches than this are planned off the event loop: planning costs
per patch (a timestamp and a block each under Qwen3-VL rules), not only per token."""


def is_light(
    segments: Sequence[mrope.Text | mrope.Image | mrope.Video], rules: LayoutRules, settings: Settings
) -> bool:
    """Whether counting, building and rendering ``segments`` is cheap enough for the event loop."""
    patches = sum(seg.grid[0] for seg in segments if isinstance(seg, mrope.Video))
    return patches <= INLINE_PATCHES and token_floor(segments, rules) < settings.inline_tokens


def count_tokens(
    segments: Sequence[mrope.Text | mrope.Image | mrope.Video],
    rules: LayoutRules,
    settings: Settings,
    tokenizer: Any,
) -> int:
    """The exact token count of ``segments``, refusing (413) anything over ``MROPE_MAX_TOKENS`` before a
    position is written: first by :func:`token_floor`, then by :func:`mrope.count_tokens` (which needs
    the tokenizer for timestamped videos: 422 without one)."""
    check_tokens(token_floor(segments, rules), settings)
    check_tokenizer_for_videos(segments, rules, tokenizer)
    n = mrope.count_tokens(segments, rules=rules, tokenizer=tokenizer)
    check_tokens(n, settings)
    return n


def check_tokens(n: int, settings: Settings, what: str = "the token count") -> None:
    if n > settings.max_tokens:
        raise over_cap("too_many_tokens", what, n, "MROPE_MAX_TOKENS", settings.max_tokens)


def check_tokenizer_for_videos(
    segments: Sequence[mrope.Text | mrope.Image | mrope.Video], rules: LayoutRules, tokenizer: Any
) -> None:
    """Qwen3-VL-style rules put timestamp text before every temporal patch: that needs the tokenizer."""
    if tokenizer is not None or rules.temporal != "timestamps":
        return
    for i, seg in enumerate(segments):
        if isinstance(seg, mrope.Video) and seg.wrap:
            raise ServiceError(
                422,
                "tokenizer_required",
                f"segment {i} is a video under the {rules.name!r} rules, which put timestamp text before each "
                "temporal patch: start the service with MROPE_TOKENIZER set to the model's tokenizer.json, "
                "or send the video with wrap=false for bare vision tokens",
                cap="MROPE_TOKENIZER",
            )
