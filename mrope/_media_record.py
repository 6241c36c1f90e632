"""What one media item of a result was sized by: :class:`MediaRecord`, a leaf value type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MediaRecord:
    """How one image or video of a request was read and sized, for a result to carry beside its grid.

    Attributes:
        kind: ``"image"`` or ``"video"`` (a video file or a list of frame images).
        route: the route whose pipeline read it (``"processor"``, ``"qwen-vl-utils"``, ``"vllm"``).
        size: ``(height, width)`` in pixels after the resize (one frame's, for a video).
        frames: frames read: the sampled frames of a video file, the frame images of a list (before the
            padding to a multiple of the temporal patch), 1 for an image.
        sources: ``(key, origin)`` for each sizing key of ``kind``, where its value came from
            (:func:`mrope.media.sizing_sources`: ``"record key 'fps'"``, ``"route 'qwen-vl-utils'
            default"``, ``"checkpoint preprocessor_config.json: min_pixels"``, ``"preset 'qwen2-vl'"``,
            ``"rules 'qwen2-vl'"`` when only rules were given).
    """

    kind: str
    route: str
    size: tuple[int, int]
    frames: int
    sources: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, Any]:
        """The record as plain JSON values: ``{"kind", "route", "size": [h, w], "frames", "sources":
        {key: origin}}``."""
        return {
            "kind": self.kind,
            "route": self.route,
            "size": list(self.size),
            "frames": self.frames,
            "sources": dict(self.sources),
        }


__all__ = ["MediaRecord"]
