"""Segment inputs: a sequence is an ordered list of :class:`Text`, :class:`Image`, :class:`Video` and
:class:`Audio`.

Grids are encoder patch grids ``(t, h, w)``, exactly as Hugging Face processors report them in
``image_grid_thw`` / ``video_grid_thw``; the builder divides h and w by the merge size. Segments are
plain frozen values: they know nothing of files (see :mod:`mrope.media` for reading media) and nothing
of a model (the :class:`~mrope.LayoutRules` given to the builder decide the coordinates).
"""

from __future__ import annotations

import math
import operator
import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mrope._errors import LayoutError
from mrope._media_record import MediaRecord

MAX_TILES = 1 << 16
"""Most tiles one image (or video frame) may have, checked when the segment is made; InternVL-style plans
use up to a few dozen."""

_SEQUENCES = frozenset((tuple, list))
_INT = frozenset((int,))
_INTEGER_DTYPE = re.compile(r"(^|\.)u?int\d+$")  # numpy "int64", torch "torch.uint8"


def _exact_ints(value: Any) -> tuple[int, ...] | None:
    """``value`` as a tuple of ints when every item is an integer (int, integral float, numpy int), else
    ``None``: 1.5 must be refused, not truncated to 1."""
    if type(value) in _SEQUENCES and set(map(type, value)) <= _INT:  # plain ints: nothing to check
        return tuple(value)
    if isinstance(value, (str, bytes)):
        return None
    try:
        items = list(value)
        out = tuple(int(v) for v in items)
        if any(isinstance(v, bool) or float(v) != i for v, i in zip(items, out, strict=True)):
            return None
    except (TypeError, ValueError, OverflowError):
        return None
    return out


def _grid(value: Any, what: str) -> tuple[int, int, int]:
    grid = _exact_ints(value)
    if grid is None or len(grid) != 3 or min(grid) < 1:
        raise LayoutError(f"{what} grid must be three positive ints (t, h, w); got {value!r}")
    return grid  # type: ignore[return-value]


def _thumbnail_grid(value: Any, owner: str) -> tuple[int, int, int]:
    """A sliced picture's thumbnail grid: one frame, ``(1, h, w)`` patches."""
    grid = _grid(value, f"{owner} thumbnail")
    if grid[0] != 1:
        raise LayoutError(f"{owner} thumbnail_grid is one frame, (1, h, w); got {value!r}")
    return grid


def _sized(value: Any, n: int) -> bool:
    """Whether ``value`` has a length and it is ``n`` (checked before any copy of it is made)."""
    try:
        return len(value) == n
    except TypeError:
        return False


def _tiles(value: Any, owner: str) -> tuple[int, int]:
    """``(cols, rows)``: two positive ints whose product is at most :data:`MAX_TILES`."""
    tiles = _exact_ints(value)
    if tiles is None or len(tiles) != 2 or min(tiles) < 1:
        raise LayoutError(f"{owner} tiles must be (cols, rows), two positive ints; got {value!r}")
    if tiles[0] * tiles[1] > MAX_TILES:
        raise LayoutError(
            f"{owner} tiles {tiles[0]}x{tiles[1]} are {tiles[0] * tiles[1]} tiles; at most {MAX_TILES} are "
            "supported"
        )
    return tiles  # type: ignore[return-value]


def _keep_mask(value: Any, owner: str) -> tuple[np.ndarray, bytes]:
    """A ``keep=`` mask as a read-only 1-D numpy bool array, and the bytes that stand for it in ``==`` and
    ``hash`` (its length, then its bits). Takes a numpy or torch bool array or a list of Python bools."""
    arr = value
    if hasattr(arr, "detach") and hasattr(arr, "cpu"):  # a torch tensor, without importing torch
        arr = arr.detach().cpu().numpy()
    elif not isinstance(arr, np.ndarray):
        if isinstance(arr, (str, bytes)) or not hasattr(arr, "__len__"):
            raise LayoutError(f"{owner} keep must be a 1-D bool mask; got {reprlib.repr(value)}")
        if not all(type(v) is bool or isinstance(v, np.bool_) for v in arr):
            raise LayoutError(
                f"{owner} keep must be a 1-D mask of bools (True keeps a token); got {reprlib.repr(value)}"
            )
        arr = np.asarray(arr, dtype=bool)
    if arr.dtype != np.bool_ or arr.ndim != 1:
        raise LayoutError(
            f"{owner} keep must be a 1-D bool mask (True keeps a token); got dtype {arr.dtype}, shape "
            f"{tuple(arr.shape)}"
        )
    arr = arr.copy()
    arr.flags.writeable = False
    return arr, len(arr).to_bytes(8, "little") + np.packbits(arr).tobytes()


def _positive(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise LayoutError(f"{name} must be a finite number > 0; got {value!r}")
    return float(value)


@dataclass(frozen=True, init=False)
class Text:
    """A run of text tokens: ``Text(12)`` (a count) or ``Text([101, 102, ...])`` (token ids).

    Attributes:
        num_tokens: how many tokens.
        token_ids: the ids when given, else ``None``.
    """

    num_tokens: int
    token_ids: tuple[int, ...] | None

    def __init__(self, tokens: int | Sequence[int]) -> None:
        if isinstance(tokens, bool):
            raise LayoutError(f"Text takes a token count or a list of token ids; got {tokens!r}")
        if isinstance(tokens, int) or (hasattr(tokens, "__index__") and not hasattr(tokens, "__len__")):
            n = int(tokens)
            if n < 0:
                raise LayoutError(f"Text token count must be >= 0; got {n}")
            ids = None
        else:
            try:
                dtype = getattr(tokens, "dtype", None)
                if dtype is not None:  # a numpy array or torch tensor: integer and 1-D, read in one call
                    if not _INTEGER_DTYPE.search(str(dtype)) or getattr(tokens, "ndim", 1) != 1:
                        raise TypeError("not a 1-D integer array")
                    ids = tuple(tokens.tolist())
                elif type(tokens) in _SEQUENCES and set(map(type, tokens)) <= _INT:
                    ids = tuple(tokens)
                else:
                    # operator.index takes ints (numpy and torch scalars too) and refuses 1.5 and 2.0 alike
                    ids = tuple(map(operator.index, tokens))
                    if any(type(i) is bool for i in tokens):
                        raise TypeError("bool")
            except (TypeError, ValueError):
                raise LayoutError(
                    f"Text takes a token count or a list of integer token ids (no floats, no bools); got {reprlib.repr(tokens)}"
                ) from None
            n = len(ids)
            if ids and (min(ids) < 0 or max(ids) >= 2**63):
                raise LayoutError(f"Text token ids must be in [0, 2**63); got one of {min(ids)}..{max(ids)}")
        object.__setattr__(self, "num_tokens", n)
        object.__setattr__(self, "token_ids", ids)


@dataclass(frozen=True)
class Image:
    """One image (or one tiled image) as a patch grid.

    Attributes:
        grid: encoder patch grid ``(t, h, w)`` of the whole (resized) image; ``t`` is 1 for images.
        tiles: ``(cols, rows)`` when the image is cut into tiles: its tokens are emitted tile by tile
            (tiles row-major unless ``tile_order`` says otherwise, each tile in raster order); the merged
            grid must divide evenly into tiles. ``None`` for an untiled image.
        thumbnail: with tiles, a thumbnail block of one tile's size follows the tiles.
        tile_order: the order in which the tiles' tokens are emitted, as row-major tile indices
            (``r * cols + c``); ``None`` means row-major. Under the ``global`` tile rule the coordinates
            of a tile do not depend on this order.
        origin: the crop origin ``(row, col)`` in merged-grid tokens of the source image; used by the
            ``crop="keep"`` rule, ignored by ``crop="reset"``.
        wrap: emit the rules' vision_start / vision_end tokens around the image.
        thumbnail_grid: with tiles, a thumbnail of its own grid that comes FIRST, before the tiles (MiniCPM-V's
            canvas rule, ``positions_base="canvas"``: the thumbnail is stretched over the tiles' canvas and
            each tile is a detail slice).
        keep: a pruning mask (see docs/pruning.md): one bool per language-model token of the image, in
            prompt order (``t`` outermost, ``w`` fastest; a tiled image tile by tile in the order its
            tiles are emitted, the thumbnail where it is emitted, MiniCPM-V's thumbnail first). ``False``
            drops the token from the prompt; every other token keeps the position it has unpruned. Its
            length is checked against the rules when the prompt is built. ``None``: nothing is pruned.
        generate: an image the model will generate (GLM-Image's targets): it takes no prompt tokens,
            its grid is reported after the prompt's images, and its positions are decode-time
            positions (:attr:`mrope.Positions.generation_ids`). Targets come after every other segment.
        record: how :func:`mrope.media.load_image` read and sized it (:class:`mrope.media.MediaRecord`);
            ``None`` for an image given by its grid. Not compared.
    """

    grid: tuple[int, int, int]
    tiles: tuple[int, int] | None = None
    thumbnail: bool = False
    tile_order: tuple[int, ...] | None = None
    origin: tuple[int, int] = (0, 0)
    wrap: bool = True
    generate: bool = False
    thumbnail_grid: tuple[int, int, int] | None = None
    keep: np.ndarray | None = field(default=None, compare=False)  # compared by its bits (see below)
    record: MediaRecord | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _grid(self.grid, "Image"))
        if self.keep is not None:
            if self.generate:
                raise LayoutError(
                    "an Image to generate (generate=True) has no prompt tokens to prune (keep=)"
                )
            for name, value in zip(("keep", "_keep_bits"), _keep_mask(self.keep, "Image"), strict=True):
                object.__setattr__(self, name, value)
        if self.thumbnail_grid is not None:
            object.__setattr__(self, "thumbnail_grid", _thumbnail_grid(self.thumbnail_grid, "Image"))
            if self.tiles is None or self.thumbnail:
                raise LayoutError("Image thumbnail_grid needs tiles=(cols, rows) and no thumbnail=True")
        if self.tiles is not None:
            tiles = _tiles(self.tiles, "Image")
            object.__setattr__(self, "tiles", tiles)
            if self.grid[0] != 1:
                raise LayoutError(f"a tiled Image must have t == 1 in its grid; got grid {self.grid}")
            n = tiles[0] * tiles[1]  # at most MAX_TILES: the order below is checked in O(n) memory
            if self.tile_order is not None:
                order = _exact_ints(self.tile_order) if _sized(self.tile_order, n) else None
                if order is None or sorted(order) != list(range(n)):
                    raise LayoutError(
                        f"Image tile_order must be a permutation of 0..{n - 1} for {tiles[0]}x{tiles[1]} "
                        f"tiles; got {reprlib.repr(self.tile_order)}"
                    )
                object.__setattr__(self, "tile_order", order)
        elif self.thumbnail or self.tile_order is not None:
            raise LayoutError("Image thumbnail and tile_order need tiles=(cols, rows)")
        origin = _exact_ints(self.origin)
        if origin is None or len(origin) != 2 or min(origin) < 0 or max(origin) >= 2**40:
            raise LayoutError(f"Image origin must be (row, col), two ints in [0, 2**40); got {self.origin!r}")
        object.__setattr__(self, "origin", origin)
        if not isinstance(self.generate, bool):
            raise LayoutError(f"Image generate must be true or false; got {self.generate!r}")
        if self.generate and (
            self.tiles is not None or self.grid[0] != 1 or origin != (0, 0) or not self.wrap
        ):
            raise LayoutError(
                "an Image to generate (generate=True) is one 2-D target: grid (1, h, w), no tiles, no origin, "
                f"wrap=True; got grid {self.grid}, tiles {self.tiles}, origin {origin}, wrap {self.wrap}"
            )


@dataclass(frozen=True, init=False)
class Audio:
    """One audio clip: a 1-D run of audio tokens, wrapped in the model's audio start / end tokens.

    Give exactly one of ``tokens``, ``seconds`` or ``mel_frames``; the model's rules turn the last two
    into a token count (:func:`mrope.audio_tokens`); the segment only carries what was given.

    Attributes:
        tokens: the number of audio tokens (what the processor writes between the audio start / end).
        seconds: the clip's duration in seconds (samples at the model's sampling rate, then mel frames).
        mel_frames: the feature length in mel frames (100 per second at 16 kHz with hop 160): what the
            model takes as ``audio_seqlens`` (``feature_attention_mask.sum(-1)``).
        wrap: emit the audio start / end tokens (always on for audio inside a video).
    """

    tokens: int | None
    seconds: float | None
    mel_frames: int | None
    wrap: bool

    def __init__(
        self,
        tokens: int | None = None,
        *,
        seconds: float | None = None,
        mel_frames: int | None = None,
        wrap: bool = True,
    ) -> None:
        given = [
            name
            for name, v in (("tokens", tokens), ("seconds", seconds), ("mel_frames", mel_frames))
            if v is not None
        ]
        if len(given) != 1:
            raise LayoutError(
                f"Audio takes exactly one of tokens=, seconds= or mel_frames=; got {given or 'none'}"
            )
        for name, v in (("tokens", tokens), ("mel_frames", mel_frames)):
            if v is not None:
                if isinstance(v, bool) or not hasattr(v, "__index__") or not 1 <= int(v) < 2**40:
                    raise LayoutError(f"Audio {name} must be an int in [1, 2**40); got {v!r}")
        if seconds is not None:
            _positive(seconds, "Audio seconds")
            if seconds >= 2**32:
                raise LayoutError(f"Audio seconds must be below 2**32; got {seconds!r}")
        if not isinstance(wrap, bool):
            raise LayoutError(f"Audio wrap must be a bool; got {wrap!r}")
        object.__setattr__(self, "tokens", None if tokens is None else int(tokens))
        object.__setattr__(self, "seconds", None if seconds is None else float(seconds))
        object.__setattr__(self, "mel_frames", None if mel_frames is None else int(mel_frames))
        object.__setattr__(self, "wrap", wrap)


@dataclass(frozen=True)
class Video:
    """One video as a patch grid of sampled frames.

    Attributes:
        grid: encoder patch grid ``(t, h, w)``; ``t`` counts temporal patches (sampled frames divided by
            the temporal patch size).
        fps: the sampling rate of the frames that made the grid, frames per second. ``None`` takes the
            rules' default (2.0).
        second_per_grid: seconds covered by one temporal patch; ``None`` means
            ``temporal_patch_size / fps``, as the processors compute it.
        frame_times: the sampled frames' times in seconds (for Qwen3-VL timestamps, and exact for
            variable-rate files); ``None`` means ``k / fps`` for frame k.
        wrap: emit the rules' wrapper tokens (and, for Qwen3-VL, the timestamp text).
        audio: the video's own audio track, for models that interleave it with the frames by time
            (Qwen2.5-Omni / Qwen3-Omni with ``use_audio_in_video``); ``None`` for a silent video or
            when the audio is not used.
        tiles, thumbnail_grid: MiniCPM-V's canvas rule (``positions_base="canvas"``) only: every frame is a
            thumbnail of grid ``thumbnail_grid`` followed by ``tiles=(cols, rows)`` detail slices that split
            the frame's ``(h, w)``; both or neither.
        keep: a pruning mask (see docs/pruning.md): one bool per language-model token of the video's
            frames, in prompt order (``t`` outermost, ``w`` fastest; audio tokens are not in it). ``False``
            drops the token; every other token (timestamps and wrappers of a frame that keeps nothing
            included) keeps the position it has unpruned. ``None``: nothing is pruned.
        record: how :func:`mrope.media.load_video` / :func:`~mrope.media.load_frames` read and sized it
            (:class:`mrope.media.MediaRecord`); ``None`` for a video given by its grid. Not compared.
    """

    grid: tuple[int, int, int]
    fps: float | None = None
    second_per_grid: float | None = None
    frame_times: tuple[float, ...] | None = None
    wrap: bool = True
    audio: Audio | None = None
    tiles: tuple[int, int] | None = None
    thumbnail_grid: tuple[int, int, int] | None = None
    keep: np.ndarray | None = field(default=None, compare=False)  # compared by its bits (see below)
    record: MediaRecord | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _grid(self.grid, "Video"))
        if self.keep is not None:
            for name, value in zip(("keep", "_keep_bits"), _keep_mask(self.keep, "Video"), strict=True):
                object.__setattr__(self, name, value)
        if self.fps is not None:
            object.__setattr__(self, "fps", _positive(self.fps, "Video fps"))
        if self.second_per_grid is not None:
            object.__setattr__(
                self, "second_per_grid", _positive(self.second_per_grid, "Video second_per_grid")
            )
        if self.frame_times is not None:
            try:
                times = tuple(float(t) for t in self.frame_times)
            except (TypeError, ValueError):
                raise LayoutError(f"Video frame_times must be numbers; got {self.frame_times!r}") from None
            if not times or not all(math.isfinite(t) and t >= 0 for t in times):
                raise LayoutError("Video frame_times must be a non-empty list of finite times >= 0 seconds")
            if any(b < a for a, b in zip(times, times[1:], strict=False)):
                raise LayoutError("Video frame_times must be non-decreasing")
            object.__setattr__(self, "frame_times", times)
        if self.audio is not None and not isinstance(self.audio, Audio):
            raise LayoutError(f"Video audio must be an mrope.Audio or None; got {type(self.audio).__name__}")
        if (self.tiles is None) != (self.thumbnail_grid is None):
            raise LayoutError("Video tiles and thumbnail_grid go together (MiniCPM-V's sliced frames)")
        if self.tiles is not None:
            object.__setattr__(self, "tiles", _tiles(self.tiles, "Video"))
            object.__setattr__(self, "thumbnail_grid", _thumbnail_grid(self.thumbnail_grid, "Video"))

    def resolved_second_per_grid(self, temporal_patch_size: int, default_fps: float) -> float:
        """Seconds per temporal patch: ``second_per_grid`` or ``temporal_patch_size / fps``."""
        if self.second_per_grid is not None:
            return self.second_per_grid
        return temporal_patch_size / (self.fps if self.fps is not None else default_fps)

    def patch_times(self, temporal_patch_size: int, default_fps: float, which: str = "mean") -> list[float]:
        """The time of each temporal patch in seconds: the mean of the patch's first and last frame time
        (``which="mean"``, Qwen3-VL) or its first frame time (``"first"``, GLM-4.1V), after padding the
        frames to a multiple of the patch size by repeating the last one."""
        p = temporal_patch_size
        n_patches = self.grid[0]
        if self.frame_times is None:
            fps = self.fps if self.fps is not None else default_fps
            times = [k / fps for k in range(n_patches * p)]
        else:
            times = list(self.frame_times)
            if len(times) % p:
                times.extend([times[-1]] * (p - len(times) % p))
            if len(times) != n_patches * p:
                raise LayoutError(
                    f"Video has {len(self.frame_times)} frame_times, which make {len(times) // p} temporal "
                    f"patches of {p} frames, but its grid has t = {n_patches}"
                )
        if which == "first":
            return [times[i * p] for i in range(n_patches)]
        return [(times[i * p] + times[i * p + p - 1]) / 2 for i in range(n_patches)]


def _mask_equality(cls: type) -> None:
    """``==`` of ``cls`` also compares the ``keep`` masks, by their bits (kept as ``_keep_bits``, not a
    field); ``hash`` stays the dataclass's, over the other fields (equal values still hash alike)."""
    fields_equal = cls.__eq__

    def __eq__(self: Any, other: Any) -> Any:  # noqa: N807
        same = fields_equal(self, other)
        if same is not True:
            return same
        return self.__dict__.get("_keep_bits") == other.__dict__.get("_keep_bits")

    cls.__eq__ = __eq__  # type: ignore[method-assign]


_mask_equality(Image)
_mask_equality(Video)


Segment = Text | Image | Video | Audio
