"""Where each sizing value of a media item came from: the item's own key, the route, the checkpoint or
the preset (:func:`sizing_sources`).

A value is looked for in that order, as :func:`mrope.media.load_image` / :func:`~mrope.media.load_video`
apply them: an item's key (``min_pixels``, ``fps``, ...) wins; then the route's own constants
(``"qwen-vl-utils"`` fixes a video's bounds and sampling: :mod:`mrope.models._routes`); then the file and
key a checkpoint folder gave (:attr:`mrope.models.ModelFamily.rule_sources`, filled by
:func:`mrope.from_pretrained`); else the family's preset in the registry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mrope._media_record import MediaRecord
from mrope._route import Route
from mrope.models import ModelFamily, ModelLike, get_family
from mrope.models._registry import get_route

IMAGE_VALUES = {"min_pixels": "image_min_pixels", "max_pixels": "image_max_pixels"}
"""An image's sizing keys -> the :class:`~mrope.LayoutRules` field each stands for."""

VIDEO_VALUES = {
    "min_pixels": "video_min_pixels",
    "max_pixels": "video_max_pixels",
    "total_pixels": "video_total_pixels",
    "fps": "fps",
    "min_frames": "min_frames",
    "max_frames": "max_frames",
}
"""A video's sizing keys -> the :class:`~mrope.LayoutRules` field each stands for."""

_ROUTE_CONSTANTS = {
    "video_min_pixels": "video_min_tokens",
    "video_max_pixels": "video_max_tokens",
    "video_total_pixels": "video_seq_tokens",
    "fps": "fps",
    "min_frames": "min_frames",
    "max_frames": "max_frames",
}
"""A rules field -> the :attr:`Route.video_rules` constant that sets it."""


def sizing_sources(
    kind: str, model: ModelLike, *, route: str | Route | None = None, keys: Iterable[str] = ()
) -> dict[str, str]:
    """Where each sizing value of one media item comes from, for a result to record.

    Args:
        kind: ``"image"`` or ``"video"`` (a video file or a list of frames).
        model: a family name, or what :func:`mrope.from_pretrained` returns.
        route: the item's route (default ``"processor"``).
        keys: the sizing keys the item itself sets (``min_pixels``, ``fps``, ...).

    Returns:
        ``{key: origin}`` for every sizing key of ``kind``: ``"record key 'fps'"``, ``"route
        'qwen-vl-utils' default"``, ``"checkpoint preprocessor_config.json: min_pixels"`` or ``"preset
        'qwen2.5-vl'"``.
    """
    family = model if isinstance(model, ModelFamily) else get_family(model)
    return _origins(kind, family, family.name, get_route(route), set(keys))


def _origins(kind: str, family: ModelFamily | None, name: str, way: Route, given: set[str]) -> dict[str, str]:
    """:func:`sizing_sources` for a family, or for rules alone (``family=None``: ``"rules 'name'"``)."""
    table = IMAGE_VALUES if kind == "image" else VIDEO_VALUES
    fixed = dict(way.video_rules) if kind != "image" else {}
    out = {}
    for key, field in table.items():
        if key in given:
            out[key] = f"record key {key!r}"
        elif _ROUTE_CONSTANTS.get(field) in fixed:
            out[key] = f"route {way.name!r} default"
        elif family is None:
            out[key] = f"rules {name!r}"
        elif field in family.rule_sources:
            out[key] = f"checkpoint {family.rule_sources[field]}"
        else:
            out[key] = f"preset {family.name!r}"
    return out


def media_record(
    kind: str,
    model: ModelLike | None,
    rules_name: str,
    route: str | Route | None,
    given: dict[str, Any],
    size: tuple[int, int],
    frames: int,
) -> MediaRecord:
    """The :class:`MediaRecord` of one item a loader sized: ``given`` holds the item's sizing keys
    (``None`` for one it does not set); without ``model`` (rules alone) the other values are the rules'."""
    way = get_route(route)
    family = None if model is None else model if isinstance(model, ModelFamily) else get_family(model)
    keys = {k for k, v in given.items() if v is not None}
    origins = _origins(kind, family, rules_name, way, keys)
    return MediaRecord(
        kind=kind,
        route=way.name,
        size=(int(size[0]), int(size[1])),
        frames=int(frames),
        sources=tuple(origins.items()),
    )


__all__ = ["IMAGE_VALUES", "VIDEO_VALUES", "media_record", "sizing_sources"]
