"""A route's own video constants applied to a family's rules (the routes themselves:
:mod:`mrope.models._routes`)."""

from __future__ import annotations

import dataclasses

from mrope._route import Route
from mrope._rules import LayoutRules


def route_video_rules(lay: LayoutRules, route: Route) -> LayoutRules:
    """The rules with the route's own video sampling and constants in place of the checkpoint's
    (qwen-vl-utils: ``fetch_video`` sizes every model's video by its constants at the model's resize
    factor, so a checkpoint folder and the registry's model give one answer; vLLM: its loader for the
    checkpoint's video processor samples its own way, :attr:`~mrope._route.Route.frame_samplers`)."""
    own = dict(route.frame_samplers).get(lay.frame_sampling)
    if own is not None:
        lay = dataclasses.replace(lay, frame_sampling=own)
    fixed = dict(route.video_rules)
    if not fixed:
        return lay
    area = lay.resize_factor**2
    return dataclasses.replace(
        lay,
        frame_sampling="qwen-vl-utils",
        video_bounds="frame",
        video_min_pixels=int(fixed["video_min_tokens"] * area),
        video_max_pixels=int(fixed["video_max_tokens"] * area),
        video_total_pixels=int(fixed["video_seq_tokens"] * area * 0.9),
        fps=float(fixed["fps"]),
        min_frames=int(fixed["min_frames"]),
        max_frames=int(fixed["max_frames"]),
    )


__all__ = ["route_video_rules"]
