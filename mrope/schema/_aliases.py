"""The media keys users copy from model cards, read as this schema's own: ``image`` / ``image_url`` /
``url`` / ``video`` / ``video_url`` become ``path`` (or ``frames``), ``type`` ``image_url`` /
``video_url`` becomes ``image`` / ``video``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mrope.media._memory import in_memory

MEDIA_TYPES = {"image_url": "image", "video_url": "video"}
"""The ``type`` values of OpenAI's content items -> this schema's segment types."""


def media_aliases(data: Any, kind: str) -> Any:
    """The forms users copy from model cards, as this schema's keys: ``"image_url"`` / ``"url"`` (an
    OpenAI ``{"url": ...}`` object or a string) and a ``kind`` key (``"image": "cat.jpg"``) become
    ``path``; a list of files under any of them (a video as its frames), or numpy frames ``[T, H, W, C]``,
    becomes ``frames``; a file in memory (:func:`mrope.media._memory.in_memory`) is a file like a path;
    ``type`` ``"image_url"`` / ``"video_url"`` becomes ``kind``. Exactly one of those keys may be given."""
    if not isinstance(data, Mapping):
        return data
    names = [k for k in (kind, f"{kind}_url", "url", "path") if data.get(k) is not None]
    renamed = isinstance(data.get("type"), str) and data["type"] in MEDIA_TYPES
    if not renamed and (not names or names == ["path"]) and not _frames(data.get("path"), kind):
        return data
    if len(names) > 1:
        raise ValueError(
            f"give the {kind} as {' or '.join(repr(n) for n in names)}, "
            + ("not both" if len(names) == 2 else "only one of them")
        )
    out = {k: v for k, v in data.items() if k not in names}
    if renamed:
        out["type"] = MEDIA_TYPES[data["type"]]
    if names:
        value = data[names[0]]
        if isinstance(value, Mapping) and set(value) <= {"url", "detail"} and "url" in value:
            value = value["url"]  # OpenAI's {"image_url": {"url": ..., "detail": ...}}
        if _frames(value, kind):
            out["frames"] = value if isinstance(value, np.ndarray) else list(value)
        elif isinstance(value, str) or in_memory(value):
            out["path"] = value
        else:  # left under the key the user wrote, so that its error names that key
            out[names[0]] = value
    return out


def _frames(value: Any, kind: str) -> bool:
    """Whether ``value`` is a video given as its frames: a list of files, or numpy frames ``[T, H, W, C]``
    (any array: its shape is checked with the frames)."""
    return kind == "video" and isinstance(value, (list, tuple, np.ndarray))


def retype(items: Any) -> Any:
    """A list of segments or message items with the forms users copy read as this schema's
    (:func:`media_aliases`), before the union picks a model by ``type``; the list itself when no item
    needs it (one cheap look per item: the JSON routes' hot path)."""
    if not isinstance(items, list) or not any(map(_aliased, items)):
        return items
    return [media_aliases(v, MEDIA_TYPES.get(v["type"], v["type"])) if _aliased(v) else v for v in items]


def _aliased(item: Any) -> bool:
    """Whether ``item`` is a media item written with a key or ``type`` :func:`media_aliases` renames."""
    if type(item) is not dict and not isinstance(item, Mapping):
        return False
    kind = item.get("type")
    if kind == "text":
        return False
    if kind == "image":
        return "image" in item or "image_url" in item or "url" in item
    if kind == "video":
        return "video" in item or "video_url" in item or "url" in item or _frames(item.get("path"), "video")
    return isinstance(kind, str) and kind in MEDIA_TYPES


def retype_segments(data: Any) -> Any:
    """``data`` with its ``segments`` retyped (:func:`retype`)."""
    if isinstance(data, Mapping) and isinstance(data.get("segments"), list):
        items = retype(data["segments"])
        if items is not data["segments"]:
            return {**data, "segments": items}
    return data
