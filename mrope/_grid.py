"""Grid arithmetic: encoder grids to LLM grids, tokens per frame, time offsets, generation targets, bounds.

Every layout engine and the token-id scan size vision blocks with these functions, so a grid means the
same number of tokens everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mrope._errors import LayoutError
from mrope._rules import LayoutRules
from mrope._segments import MAX_TILES  # the bound lives with the value type that checks it

TEXT_FILL_ID = 0
"""Token id written into :attr:`Positions.input_ids` for text given as a count only."""

MAX_POSITION = 2**62
"""Largest position the builder writes: int64 with headroom for ``position + delta`` arithmetic."""

MAX_GENERATED_TOKENS = 1 << 22
"""Most tokens of images to generate per sequence (GLM-Image's largest target, 2048 px at 32 px a token,
is 4096)."""


def merged_grid(
    grid: Sequence[int], merge_size: int, what: str = "vision", temporal_merge_size: int = 1
) -> tuple[int, int, int]:
    """Encoder grid ``(t, h, w)`` -> LLM grid ``(t / tm, h / m, w / m)``; h and w must divide by ``m``
    and t by ``tm`` (``temporal_merge_size``, 1 for images)."""
    t, h, w = (int(v) for v in grid)
    if min(t, h, w) < 1:
        raise LayoutError(f"{what} grid must be positive (t, h, w); got {tuple(grid)}")
    if h % merge_size or w % merge_size:
        raise LayoutError(
            f"{what} grid {(t, h, w)}: h and w must be multiples of the merge size {merge_size}"
        )
    if t % temporal_merge_size:
        raise LayoutError(
            f"{what} grid {(t, h, w)}: t must be a multiple of the temporal merge size {temporal_merge_size}"
        )
    return t // temporal_merge_size, h // merge_size, w // merge_size


def frame_tokens(merged_h: int, merged_w: int, rules: LayoutRules) -> int:
    """Tokens of one LLM frame ``H' x W'``: ``H' * (W' + 1)`` under the ``row_newline`` rule."""
    return merged_h * (merged_w + rules.row_newline)


def target_positions(start: int, grids: Sequence[Sequence[int]], merge_size: int = 1) -> np.ndarray:
    """Decode-time positions of images a model generates (GLM-Image), int64 ``[3, n + 1]``.

    The targets are generated last grid first. Target ``(1, h, w)`` (merged by ``merge_size``) starting
    at ``d`` gets ``t = d``, ``h = d + row``, ``w = d + col`` in raster order, then ``d += max(H', W')``;
    one end-marker token at ``d`` follows. ``start`` is the first position after the prompt.
    """
    merged = [merged_grid(g, merge_size, "generation target") for g in grids]
    total = sum(t * hh * ww for t, hh, ww in merged)
    if total > MAX_GENERATED_TOKENS:
        raise LayoutError(
            f"images to generate: {total:,} tokens for target grids {[tuple(int(v) for v in g) for g in grids]}; "
            f"at most {MAX_GENERATED_TOKENS:,} are supported"
        )
    parts: list[np.ndarray] = []
    d = int(start)
    for _, hh, ww in reversed(merged):
        block = np.empty((3, hh, ww), dtype=np.int64)
        block[0] = d
        block[1] = d + np.arange(hh, dtype=np.int64)[:, None]
        block[2] = d + np.arange(ww, dtype=np.int64)[None, :]
        parts.append(block.reshape(3, -1))
        d += max(hh, ww)
    parts.append(np.full((3, 1), d, dtype=np.int64))
    return np.concatenate(parts, axis=1)


def position_dtype(rules: LayoutRules) -> np.dtype:
    """The dtype of positions under ``rules``: float32 under fractional time, else int64."""
    return np.dtype(np.float32 if rules.fractional_time else np.int64)


def ceil32(x: int | float) -> int | float:
    """``ceil(fl32(x))``, a float, for a float ``x`` (the ceiling of the float32 position); an int as it is."""
    return x if isinstance(x, (int, np.integer)) else float(np.ceil(np.float32(x)))


def counter_top(top: int | float, rules: LayoutRules) -> int | float:
    """The largest position ``top`` as the counter resumes one past it: its float32 ceiling under the
    ``ceil`` advance (V2PE: text resumes at whole numbers), else ``top``."""
    return ceil32(top) if rules.advance == "ceil" else top


def delta_top(ids: np.ndarray, rules: LayoutRules) -> int | float:
    """The largest of positions ``ids`` ``[A, T]`` (``T > 0``) that the decode delta counts from
    (``delta = top + 1 - T``): over every row, or the t row's under the ``time`` advance (VideoRoPE:
    decoding resumes one past the last t), its ceiling under ``ceil``."""
    return counter_top((ids[0] if rules.advance == "time" else ids).max().item(), rules)


def plan_delta(top: int | float, total: int, rules: LayoutRules) -> int | float:
    """The decode delta of ``total`` tokens whose largest position is ``top``: ``top + 1 - total``, an
    int, or under fractional time ``fl32(fl32(top + 1) - total)`` as float32 models compute it (``top``
    taken by :func:`counter_top`)."""
    top = counter_top(top, rules)
    if not rules.fractional_time:
        return int(top + 1 - total)
    return float(np.float32(np.float32(top + 1) - np.float32(total)))


def image_time(n_frames: int, rules: LayoutRules) -> np.ndarray:
    """``tau(i) = i * temporal_stride`` of an image's ``n_frames`` merged frames: int64, or float64 for a
    stride that is not a whole number."""
    stride = rules.temporal_stride
    if float(stride).is_integer():
        return np.arange(n_frames, dtype=np.int64) * int(stride)
    return np.arange(n_frames, dtype=np.float64) * float(stride)


def seconds_product(n_patches: int, rules: LayoutRules, second_per_grid: float) -> np.ndarray:
    """``i * second_per_grid * tokens_per_second`` for ``i in [0, n_patches)``, before any rounding, grouped
    as ``rules.seconds_grouping`` says, from the float32 ``second_per_grid`` the processors hand over
    (``spg32``): ``fl32(fl32(i * spg32) * tps)`` (``"(i*spg)*tps"``), ``fl32(i * fl32(tps * spg32))``
    (``"i*(tps*spg)"``), both float32, or ``i * (f64(spg32) * tps)`` in float64 (``"i*(spg*tps) f64"``).
    Overflow gives inf; callers refuse it."""
    with np.errstate(over="ignore", invalid="ignore"):
        spg32 = np.float32(second_per_grid)
        tps32 = np.float32(rules.tokens_per_second)
        i = np.arange(n_patches, dtype=np.int64)
        i32 = i.astype(np.float32)
        if rules.seconds_grouping == "i*(tps*spg)":
            return i32 * (tps32 * spg32)
        if rules.seconds_grouping == "i*(spg*tps) f64":
            return i * (float(spg32) * float(rules.tokens_per_second))
        return (i32 * spg32) * tps32


def temporal_index(n_patches: int, rules: LayoutRules, second_per_grid: float) -> np.ndarray:
    """``tau(i)`` for ``i in [0, n_patches)``, int64 (float64 for a fractional ``temporal_stride``).

    ``i * temporal_stride`` under the index rule. Under the seconds rule the released arithmetic, in
    float32 as the model computes it from the float32 ``second_per_grid_ts`` its processor hands over
    (``spg32``), then truncated: :func:`seconds_product` (``"(i*spg)*tps"`` the released Qwen2.5-VL code,
    ``"i*(tps*spg)"`` transformers 5.x, ``"i*(spg*tps) f64"`` vLLM).
    A float64 product differs at common rates (fps 12.5, 25, 50, 100, 1.2, 2/0.7, 2/0.9).
    The timestamps rule splits a video into one-patch blocks, each with ``tau = 0``.
    """
    if rules.temporal == "index":
        return image_time(n_patches, rules)
    if rules.temporal != "seconds":
        return np.arange(n_patches, dtype=np.int64)
    t = seconds_product(n_patches, rules, second_per_grid)
    last = float(t[-1]) if n_patches else 0.0
    if not last < MAX_POSITION:  # also catches inf / nan (float overflow)
        raise LayoutError(
            f"video time offsets overflow: {n_patches - 1} patches x second_per_grid {second_per_grid:g} s "
            f"x tokens_per_second {rules.tokens_per_second:g} = {last:g}, over {MAX_POSITION:.3g}"
        )
    return t.astype(np.int64)


__all__ = [
    "MAX_GENERATED_TOKENS",
    "MAX_POSITION",
    "MAX_TILES",
    "TEXT_FILL_ID",
    "delta_top",
    "frame_tokens",
    "image_time",
    "merged_grid",
    "plan_delta",
    "position_dtype",
    "seconds_product",
    "target_positions",
    "temporal_index",
]
