"""An image segment, one model per form: by its encoder ``grid`` (:class:`ImageGrid`), by its pixel
``height`` and ``width`` (:class:`ImageSize`) or by a media ``path`` (:class:`ImagePath`).

``tiles``, ``thumbnail``, ``tile_order``, ``origin``, ``thumbnail_grid`` and ``generate`` go with a grid
or a size; ``tiling`` and ``crop`` (pixels, top/left/height/width) with a path; the qwen-vl-utils sizing
keys with a size or a path. ``thumbnail_grid`` (MiniCPM-V's canvas rule: a thumbnail of its own grid
before the tiles) needs ``tiles`` and no ``thumbnail``; ``generate`` (GLM-Image: an image the model will
generate) takes no ``tiles``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ._fields import GRID_DIM_MAX, Count, Grid, GridDim, MediaPath, MediaSource, StrictModel
from ._forms import Form, KeepMask, MediaUrl, already_sized, check_sizing, form_union

_CANVAS_ONLY = (
    ("tiling", "crop"),
    "{keys} go with a path; a grid or size takes tiles and origin",
)


class TilingOptions(StrictModel):
    """InternVL tiling of an image file (the fields of :class:`mrope.media.TilePlan`)."""

    tile_size: Count = 448
    min_tiles: Count = 1
    max_tiles: Count = 12
    thumbnail: bool = True


class _Image(Form):
    """What every image form holds: its ``type``, ``wrap`` and pruning mask."""

    type: Literal["image"]
    wrap: bool = True
    keep: KeepMask | None = Field(
        None, description="a pruning mask over the image's tokens (docs/pruning.md)"
    )


class _Canvas(_Image):
    """An image laid out on the model's canvas (a grid or a size): tiles, origin, thumbnails, generation."""

    tiles: Annotated[list[GridDim], Field(min_length=2, max_length=2)] | None = Field(
        None, description="[cols, rows]"
    )
    thumbnail: bool | None = None
    tile_order: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(max_length=65536)] | None
    ) = None
    origin: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(min_length=2, max_length=2)]
        | None
    ) = Field(None, description="[row, col] crop origin in merged tokens (default [0, 0])")
    thumbnail_grid: Grid | None = Field(
        None,
        description="MiniCPM-V (canvas rule): the encoder grid [1, h, w] of a thumbnail that comes before the "
        "tiles; needs tiles and no thumbnail",
    )
    generate: bool = Field(
        False,
        description="GLM-Image: an image the model will generate (no prompt tokens; its decode-time positions "
        "come back as generation_ids); after every other segment, no tiles",
    )

    def given_grid(self) -> list[int] | None:
        """The encoder grid [t, h, w] when the form gives one."""
        return None

    @model_validator(mode="after")
    def _canvas_rules(self) -> _Canvas:
        if self.thumbnail_grid is None and not self.generate:
            return self
        if self.thumbnail_grid is not None and (self.tiles is None or self.thumbnail):
            got = "no tiles" if self.tiles is None else "thumbnail true"
            raise ValueError(
                "thumbnail_grid (a thumbnail before the tiles) needs tiles [cols, rows] and no thumbnail "
                f"(one after the tiles); got {got}"
            )
        if self.thumbnail_grid is not None and self.thumbnail_grid[0] != 1:
            raise ValueError(f"thumbnail_grid is one frame, [1, h, w]; got {self.thumbnail_grid}")
        if self.generate and self.tiles is not None:
            raise ValueError("generate (an image the model will generate) takes no tiles")
        if self.generate:
            odd = [
                f"{k} {v}"
                for k, v, ok in (
                    ("grid", self.given_grid(), (self.given_grid() or [1])[0] == 1),
                    ("origin", self.origin, not self.origin or list(self.origin) == [0, 0]),
                    ("wrap", "false", self.wrap),
                )
                if not ok
            ]
            if odd:
                raise ValueError(
                    "generate (an image the model will generate) is one 2-D target: a grid [1, h, w] or a "
                    f"size, no origin, wrapped; got {', '.join(odd)}"
                )
        return self


class _Sized(StrictModel):
    """The qwen-vl-utils keys that size an image (its file, or its pixel size)."""

    min_pixels: Count | None = Field(None, description="qwen-vl-utils: this image's lower pixel bound")
    max_pixels: Count | None = Field(None, description="qwen-vl-utils: this image's upper pixel bound")
    resized_height: Count | None = Field(
        None, description="qwen-vl-utils: resize to this height (with resized_width), then smart-resize"
    )
    resized_width: Count | None = Field(
        None, description="qwen-vl-utils: resize to this width (with resized_height), then smart-resize"
    )

    @model_validator(mode="after")
    def _sizing(self) -> _Sized:
        check_sizing(self)
        return self


class ImageGrid(_Canvas):
    """An image given by its encoder ``grid`` [t, h, w]."""

    form = "grid"
    keys = ("grid",)
    foreign = (already_sized("an image given by grid"), _CANVAS_ONLY)

    grid: Grid

    def given_grid(self) -> list[int] | None:
        return self.grid


class ImageSize(_Sized, _Canvas):
    """An image given by its pixel ``height`` and ``width`` (sized by the model's rules)."""

    form = "size"
    keys = ("height", "width")
    foreign = (_CANVAS_ONLY,)

    height: Count
    width: Count

    @model_validator(mode="before")
    @classmethod
    def _both_sides(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and (data.get("height") is None or data.get("width") is None):
            raise ValueError("an image given by size needs both height and width")
        return data


class ImagePath(_Sized, _Image):
    """An image given by a media ``path`` (read from its header), with InternVL ``tiling`` or a ``crop``;
    from Python the file may be in memory (``bytes``, a PIL image, a numpy image ``[H, W, C]`` ``uint8``)."""

    form = "path"
    keys = ("path", "image", "image_url", "url")
    foreign = (
        (
            ("tiles", "thumbnail", "tile_order", "origin", "thumbnail_grid", "generate"),
            "{keys} {verb} with a grid or a size; a path takes tiling and crop",
        ),
    )

    path: MediaSource
    tiling: bool | TilingOptions | None = Field(None, description="InternVL tiling of a path")
    crop: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(min_length=4, max_length=4)]
        | None
    ) = Field(None, description="[top, left, height, width] in pixels of a path's image")
    image: MediaSource | None = Field(
        None, description="the file, as qwen-vl-utils names it (instead of path)"
    )
    image_url: MediaPath | MediaUrl | None = Field(
        None, description="the file as a URL string or OpenAI's {url} (instead of path)"
    )
    url: MediaPath | None = Field(None, description="the file, as transformers' chat items name it")


IMAGE_FORMS = (ImageGrid, ImageSize, ImagePath)
"""Every form of an image segment, in the order messages name them."""


def _refuse(named: list[str]) -> str:
    if named:
        return f"an image segment takes one of grid, height+width, path; got {' and '.join(named)}"
    return (
        "an image segment needs a grid [t, h, w], both height and width in pixels, or a path (a bare "
        "{\"type\": \"image\"} is a placeholder of TRL's vision format, filled from the record's 'images')"
    )


ImageSegment = form_union("image", IMAGE_FORMS, _refuse, "ImageSegment")
"""An image segment: one of :data:`IMAGE_FORMS`, told apart by which of their keys is present."""
