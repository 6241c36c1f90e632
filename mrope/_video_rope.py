"""VideoRope: the rotary side of one video-generation transformer (Wan, HunyuanVideo, CogVideoX; OmniGen2).

A video diffusion transformer rotates the queries and keys of its latent patches by their (t, h, w) grid
coordinates. Each axis owns a contiguous block of ``axis_dims[a]`` head channels (t first, then h, then w)
with its own frequency ladder ``theta ** (-2 i / axis_dims[a])``, ``i in [0, axis_dims[a] / 2)``, and the
channels pair as adjacent channels (GPT-J: ``2 i`` with ``2 i + 1``). This value holds those facts and how
a latent's coordinates are made; :func:`mrope.latent_positions` makes them and
:func:`mrope.ops.pair_table` turns the value into the pair table :func:`mrope.apply_mrope` reads.
:func:`mrope.models.video_rope` reads one from a diffusers transformer config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from mrope._errors import SpecError

FreqDtype = Literal["float64", "float32"]
FREQ_DTYPES: tuple[str, ...] = get_args(FreqDtype)


def _positive_ints(name: str, values: object, count: int) -> tuple[int, ...]:
    ok = (
        isinstance(values, (tuple, list))
        and len(values) == count
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    )
    if not ok:
        raise SpecError(f"VideoRope.{name} must be {count} positive ints; got {values!r}")
    return tuple(values)


@dataclass(frozen=True)
class VideoRope:
    """The rotary side of a video-generation transformer: axis channels, ladders, patches, coordinates.

    Attributes:
        model: the model's registry name (``"wan"``, ``"hunyuan-video"``, ``"cogvideox"``, ``"omnigen2"``).
        head_dim: channels per attention head of q and k; every channel rotates
            (``sum(axis_dims) == head_dim``).
        axis_dims: channels of the t, h and w axes, each even: a block of ``axis_dims[0]`` channels driven by
            t, then h's, then w's.
        theta: the base of every axis's ladder ``theta ** (-2 i / axis_dims[a])`` (> 0).
        patch: ``(p_t, p_h, p_w)``, latent frames, rows and columns per transformer token; the token grid of a
            latent of ``(frames, height, width)`` is ``(frames // p_t, height // p_h, width // p_w)``.
        freq_dtype: the float type the model computes its ladders and angles in: ``"float64"`` (Wan: its
            cos / sin are those of the float64 angle, rounded to fp32; OmniGen2 rotates by the float64 cos /
            sin themselves; apply both with ``angle_precision="exact"``) or ``"float32"`` (HunyuanVideo,
            CogVideoX: fp32 ladder times fp32 position; apply with ``"fp32"``). :attr:`angle_precision`
            names the one to use.
        crop_base: CogVideoX 1.0's base token grid ``(rows, cols)`` (``sample_height // p``,
            ``sample_width // p``): h and w are then float coordinates of the latent's grid fitted into that
            grid (:func:`mrope.latent_positions`). ``None``: every axis counts 0, 1, 2, ... tokens.
        max_grid: tokens per axis the model has cos / sin rows for (Wan's ``rope_max_seq_len``); ``None``:
            no bound.
        max_hw: CogVideoX 1.5's base token grid ``(rows, cols)``: its h and w count 0, 1, 2, ... from rows
            of that size, so a latent's token grid may not pass it.
        whole_patches: the patch embedding reshapes the latent into patches (CogVideoX 1.5), so frames,
            height and width must be multiples of the patch; otherwise it strides over them and drops the
            remainder.
    """

    model: str
    head_dim: int
    axis_dims: tuple[int, int, int]
    theta: float
    patch: tuple[int, int, int] = (1, 1, 1)
    freq_dtype: FreqDtype = "float32"
    crop_base: tuple[int, int] | None = None
    max_grid: int | None = None
    max_hw: tuple[int, int] | None = None
    whole_patches: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise SpecError(f"VideoRope.model must be a non-empty str; got {self.model!r}")
        hd = self.head_dim
        if not isinstance(hd, int) or isinstance(hd, bool) or hd <= 0:
            raise SpecError(f"VideoRope.head_dim must be a positive int; got {hd!r}")
        dims = _positive_ints("axis_dims", self.axis_dims, 3)
        if any(d % 2 for d in dims) or sum(dims) != hd:
            raise SpecError(
                f"VideoRope.axis_dims must be three even channel counts summing to head_dim {hd} (every "
                f"channel rotates, in pairs); got {list(dims)}"
            )
        theta = self.theta
        if not (isinstance(theta, (int, float)) and not isinstance(theta, bool) and math.isfinite(theta)):
            raise SpecError(f"VideoRope.theta must be a finite number > 0; got {theta!r}")
        if theta <= 0:
            raise SpecError(f"VideoRope.theta must be a finite number > 0; got {theta!r}")
        patch = _positive_ints("patch", self.patch, 3)
        if self.freq_dtype not in FREQ_DTYPES:
            raise SpecError(f"VideoRope.freq_dtype must be one of {FREQ_DTYPES}; got {self.freq_dtype!r}")
        base = None if self.crop_base is None else _positive_ints("crop_base", self.crop_base, 2)
        max_hw = None if self.max_hw is None else _positive_ints("max_hw", self.max_hw, 2)
        if base is not None and max_hw is not None:
            raise SpecError("VideoRope takes crop_base (CogVideoX 1.0) or max_hw (CogVideoX 1.5), not both")
        if not isinstance(self.whole_patches, bool):
            raise SpecError(f"VideoRope.whole_patches must be a bool; got {self.whole_patches!r}")
        mg = self.max_grid
        if mg is not None and (not isinstance(mg, int) or isinstance(mg, bool) or mg <= 0):
            raise SpecError(f"VideoRope.max_grid must be a positive int or None; got {mg!r}")
        object.__setattr__(self, "axis_dims", dims)
        object.__setattr__(self, "theta", float(theta))
        object.__setattr__(self, "patch", patch)
        object.__setattr__(self, "crop_base", base)
        object.__setattr__(self, "max_hw", max_hw)

    @property
    def angle_precision(self) -> Literal["exact", "fp32"]:
        """The :func:`mrope.apply_mrope` angle precision that reproduces the model's own cos / sin:
        ``"exact"`` for float64 ladders (the angle reduced exactly, rounded to fp32 once), ``"fp32"`` for
        fp32 ones (the fp32 product of position and fp32 frequency)."""
        return "exact" if self.freq_dtype == "float64" else "fp32"
