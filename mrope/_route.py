"""A route's value type: which pipeline's media loading a file is sized by (the table of routes is
:mod:`mrope.models._routes`; :func:`mrope.models._registry.get_route` looks one up by name)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Reader = Literal["torchcodec", "pyav", "torchvision", "decord"]
"""A video loader a processor is fed by (:mod:`mrope.media._readers`)."""

RouteName = Literal["processor", "qwen-vl-utils", "vllm"]
"""A route's name."""


@dataclass(frozen=True)
class Route:
    """What one pipeline does to a media file before its processor sizes it.

    Attributes:
        name: the route's name (:data:`RouteName`).
        exif_transpose: whether the image loader applies the EXIF orientation (5-8 swap ``h`` and ``w``).
        frame_list_rate: the item key that times a video given as a list of frame images: ``"fps"``
            (mrope's own key; default the rules' ``fps``) or ``"sample_fps"`` (qwen-vl-utils; default
            :attr:`frame_list_default_rate`).
        frame_list_default_rate: frames per second of a frame list whose item sets no rate, or ``None``
            for the rules' ``fps``.
        frame_prescale: each frame image of a list is first resized at ``frame_prescale x`` the resize
            factor (qwen-vl-utils: 2, its ``fetch_image`` is handed the resize factor as its patch size),
            within :attr:`frame_prescale_tokens` tokens of that factor; ``1`` for none.
        frame_prescale_tokens: ``(min, max)`` tokens of the prescale factor squared, the default bounds
            of that first resize (qwen-vl-utils' ``IMAGE_MIN_TOKEN_NUM`` / ``IMAGE_MAX_TOKEN_NUM``).
        video_reader: the loader a video file is read by (:mod:`mrope.media._readers`), ``None`` for
            mrope's metadata probe (torchcodec's count and orientation without a packet scan).
        frame_samplers: ``(the rules' frame_sampling, the route's)`` pairs: the route samples a video
            its own way where the checkpoint's video processor would sample it the first way (vLLM picks
            its loader by the checkpoint's video processor class); empty: the rules' sampling.
        video_rules: the sampling and pixel bounds of a video file the route fixes whatever the
            checkpoint says (its own constants), as rules fields in tokens of the resize factor squared
            (``video_min_tokens``, ``video_max_tokens``, ``video_seq_tokens``: the clip's budget before its
            0.9 share) and frames (``fps``, ``min_frames``, ``max_frames``); empty: the checkpoint's
            processor decides (its rules).
        source: the upstream files and lines these facts come from.
    """

    name: str
    exif_transpose: bool
    frame_list_rate: Literal["fps", "sample_fps"]
    frame_list_default_rate: float | None
    frame_prescale: int
    frame_prescale_tokens: tuple[int, int]
    video_reader: Reader | None
    frame_samplers: tuple[tuple[str, str], ...]
    video_rules: tuple[tuple[str, float], ...]
    source: str


__all__ = ["Reader", "Route", "RouteName"]
