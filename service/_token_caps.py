"""The service's token cap: a request's tokens bounded by integer arithmetic, then counted, before any position.

:func:`weigh` reads the segments once for what arithmetic alone says (a floor of the token count, the video
patches to plan, whether the request is light enough for the event loop); :func:`count_tokens` then refuses
(413) a request over ``MROPE_MAX_TOKENS`` by that floor first and by :func:`mrope.count_tokens` after, so
no ``[3, T]`` array is allocated for a request the cap refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import mrope
from mrope._audio_grid import audio_tokens
from mrope._layout import engine_for
from mrope._layout.canvas import frame_tokens as canvas_frame_tokens
from mrope._rules import LayoutRules

from ._errors import ServiceError, over_cap
from ._settings import Settings


def check_frame_times(video: mrope.Video, rules: LayoutRules, where: str) -> None:
    """422 when, under rules with timestamp text (whose planning reads them), a video's ``frame_times``
    do not make its grid's temporal patches (``temporal_patch_size`` a patch, the last one padded, as
    :meth:`mrope.Video.patch_times` pads them)."""
    times = video.frame_times
    if times is None or rules.temporal != "timestamps":
        return
    p = rules.temporal_patch_size
    if -(-len(times) // p) != video.grid[0]:
        raise ServiceError(
            422,
            "invalid_input",
            f"{where} has {len(times):,} frame_times, which make {-(-len(times) // p):,} temporal patches of "
            f"{p} frames, but its grid has t = {video.grid[0]:,}",
        )


def token_floor(segments: Sequence[mrope.Text | mrope.Image | mrope.Video], rules: LayoutRules) -> int:
    """Text tokens plus ``t * h * w / merge**2`` vision tokens per image and video (and per frame
    thumbnail of a sliced video): a lower bound of the sequence length from integer arithmetic alone.
    An image to generate (GLM-Image) counts as well, though it takes no prompt token: its decode-time
    positions are made with the prompt's, so the token cap bounds both.

    :func:`mrope.count_tokens` is exact; for a timestamped video with a tokenizer it tokenizes every
    temporal patch's time text, so a grid like ``[2**31 - 1, 2, 2]`` must be refused by this count first.
    """
    return weigh(segments, rules).token_floor


INLINE_PATCHES = 512
"""Requests with more video temporal patches than this are planned off the event loop: planning costs
per patch (a timestamp and a block each under Qwen3-VL rules), not only per token."""

EXTRA_TOKENS_PER_PIECE = 8
"""A bound on the tokens a plain image or video segment, or a video's temporal patch, adds beyond its
vision tokens (wrappers, per-frame separators), under rules without timestamp text."""


@dataclasses.dataclass(frozen=True)
class Weight:
    """What integer arithmetic alone says about a request's segments (one pass: :func:`weigh`).

    Attributes:
        token_floor: a lower bound of the token count (see :func:`token_floor`).
        video_patches: video temporal patches in all.
        pieces: segments plus the temporal patches of videos without audio.
        plain: no tiles, no audio and no timestamp text: :data:`EXTRA_TOKENS_PER_PIECE` per piece bounds
            the tokens beyond the floor.
        timed_frames: the frame times planning writes out (``temporal_patch_size`` per temporal patch
            of every video, its ``frame_times`` given or not, under rules with timestamp text); 0 under
            other rules.
    """

    token_floor: int
    video_patches: int
    pieces: int
    plain: bool
    timed_frames: int = 0

    def check_work(self, settings: Settings) -> None:
        """413 when the tokens and the frame times to plan pass ``MROPE_MAX_TOKENS`` together: planning
        costs per frame time as well as per token, and both are known here before any work."""
        if self.timed_frames:
            check_tokens(
                self.token_floor + self.timed_frames,
                settings,
                "the token count plus the video frame times to plan (temporal patches x temporal_patch_size)",
            )

    def light(self, settings: Settings) -> bool:
        """Counting, building and rendering are cheap enough for the event loop."""
        return self.video_patches <= INLINE_PATCHES and self.token_floor < settings.inline_tokens

    def surely_under_cap(self, settings: Settings) -> bool:
        """Light, and under ``MROPE_MAX_TOKENS`` by arithmetic alone: such a request can be built before
        its exact count."""
        return (
            self.plain
            and self.light(settings)
            and self.token_floor + EXTRA_TOKENS_PER_PIECE * self.pieces <= settings.max_tokens
        )


def weigh(segments: Sequence[mrope.Text | mrope.Image | mrope.Video], rules: LayoutRules) -> Weight:
    """The :class:`Weight` of ``segments`` under ``rules``."""
    m2 = rules.merge_size * rules.merge_size
    floor = patches = timed = 0
    pieces = len(segments)
    plain = rules.temporal != "timestamps"
    for i, seg in enumerate(segments):
        if isinstance(seg, mrope.Text):
            floor += seg.num_tokens
            continue
        if isinstance(seg, mrope.Audio):  # omni models: arithmetic (a LayoutError without audio rules)
            floor += audio_tokens(seg, rules)
            plain = False
            continue
        t, h, w = seg.grid
        floor += t * h * w // m2  # an image to generate (GLM-Image) counts too: its positions are made
        if isinstance(seg, mrope.Video):
            patches += t
            check_frame_times(seg, rules, f"segment {i}")
            if rules.temporal == "timestamps":
                timed += t * rules.temporal_patch_size
            if seg.audio is not None:
                floor += audio_tokens(seg.audio, rules)
                plain = False
            else:
                pieces += t
        elif not isinstance(seg, mrope.Image) or seg.tiles is not None:
            plain = False
        if seg.thumbnail_grid is not None and engine_for(rules) == "canvas":
            # MiniCPM-V's sliced pictures and frames: per frame the thumbnail and the markers (the slices'
            # own tokens are counted above)
            _, th, tw = seg.thumbnail_grid
            frames = t if isinstance(seg, mrope.Video) else 1
            floor += frames * canvas_frame_tokens(th * tw // m2, 0, seg.tiles)
            plain = False
    return Weight(floor, patches, pieces, plain, timed)


def count_tokens(
    segments: Sequence[mrope.Text | mrope.Image | mrope.Video],
    rules: LayoutRules,
    settings: Settings,
    tokenizer: Any,
    floor: int | None = None,
) -> int:
    """The exact token count of ``segments`` unpruned (the work of building them), refusing (413) anything over ``MROPE_MAX_TOKENS`` before a
    position is written: first by :func:`token_floor` (``floor`` when the caller has it), then by
    :func:`mrope.count_tokens` (which needs the tokenizer for timestamped videos: 422 without one)."""
    targets = any(isinstance(seg, mrope.Image) and seg.generate for seg in segments)
    what = "the token count with the images to generate" if targets else "the token count"
    check_tokens(token_floor(segments, rules) if floor is None else floor, settings, what)
    check_tokenizer_for_videos(segments, rules, tokenizer)
    # the cap bounds the work, and building a pruned prompt is the unpruned prompt's work: count it whole
    masked = [getattr(seg, "keep", None) is not None for seg in segments]
    pruned = any(masked)
    whole = [dataclasses.replace(s, keep=None) if m else s for s, m in zip(segments, masked, strict=True)]
    n = mrope.count_tokens(whole, rules=rules, tokenizer=tokenizer)
    check_tokens(n, settings, "the token count before pruning" if pruned else what)
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
