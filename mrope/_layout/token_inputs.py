"""The token-id interface's inputs: token ids, masks, type ids and grids read into validated numpy.

Torch tensors, numpy arrays and nested lists are all read without a copy where one can be avoided; any
malformed input is a :class:`~mrope.TokenError` that names it. The batch's mask is read into its runs
(:class:`BatchRuns`), which give every row's layout without another pass.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, NamedTuple

import numpy as np

from mrope._errors import TokenError
from mrope._rules import LayoutRules

TYPES_ERROR = "mm_token_type_ids must hold 0 (text), 1 (image) or 2 (video)"
"""The error for token type ids outside 0, 1, 2."""

TokenRuns = tuple[list[int], list[int], list[int]]
"""Starts, stops and 0/1/2 kinds of the runs of equal token type in one row."""


def as_numpy(value: Any, name: str, ndim: int | None = None) -> np.ndarray | None:
    """``value`` as a numpy array, sharing memory with a CPU torch tensor (no copy)."""
    if value is None:
        return None
    arr = value
    if not isinstance(arr, np.ndarray):
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
            try:
                arr = value.numpy()  # a view of a CPU tensor without grad
            except (RuntimeError, TypeError):  # it requires grad, lives on another device, or is bf16
                value = value.detach().cpu()
                # numpy has no bfloat16: its values widen to float32 exactly
                arr = (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy()
        else:
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError):
                raise TokenError(f"{name} must be an array of numbers; got {type(value).__name__}") from None
    if arr.dtype == object:
        raise TokenError(f"{name} must be a rectangular array of numbers")
    if ndim is not None and arr.ndim != ndim:
        raise TokenError(f"{name} must be {ndim}-D; got shape {tuple(arr.shape)}")
    return arr


_UNSIGNED = {np.dtype(f"i{size}"): np.dtype(f"u{size}") for size in (1, 2, 4, 8)}


def _unsigned(arr: np.ndarray) -> np.ndarray:
    """An integer array viewed as unsigned (negatives become huge), so ``max()`` alone bounds it."""
    unsigned = _UNSIGNED.get(arr.dtype)  # native byte order: a dict hit; others are spelled out
    if unsigned is None:
        return arr.view(arr.dtype.str.replace("i", "u")) if arr.dtype.kind == "i" else arr
    return arr.view(unsigned)


def grid_rows(value: Any, name: str) -> list[list[int]]:
    """A validated ``[n, 3]`` grid array (t, h, w, every dim >= 1) as ``n`` Python lists."""
    if value is None:
        return []
    rows = None
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        # an integer torch tensor straight to Python ints (a tensor is rectangular and holds one dtype,
        # so its first row tells its shape [n, 3] and its type)
        rows = value.tolist()
        first = rows[0] if type(rows) is list and rows else None
        if type(first) is not list or len(first) != 3 or type(first[0]) is not int:
            rows = None
    if rows is None:
        arr = as_numpy(value, name)
        if arr is None or arr.size == 0:
            return []
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise TokenError(f"{name} must have shape [n, 3] (t, h, w); got {tuple(arr.shape)}")
        if arr.dtype.kind not in "iu":
            if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                raise TokenError(f"{name} must hold integers; got {arr.tolist()}")
            arr = arr.astype(np.int64)
        rows = arr.tolist()  # a handful of rows: Python beats numpy's per-call cost
    if min(map(min, rows)) < 1:
        i, grid = next((i, grid) for i, grid in enumerate(rows) if min(grid) < 1)
        raise TokenError(f"{name}[{i}] = {grid}: every grid dim must be >= 1")
    return rows


def grid_rows_array(value: Any, name: str) -> np.ndarray:
    """:func:`grid_rows` as an int64 ``[n, 3]`` array."""
    return np.array(grid_rows(value, name), dtype=np.int64).reshape(-1, 3)


def seconds_per_grid(value: Any, n_videos: int) -> np.ndarray | None:
    """``second_per_grid_ts`` as float64 ``[n_videos]`` seconds per temporal patch, or ``None``."""
    spg = as_numpy(value, "second_per_grid_ts")
    if spg is None:
        return None
    spg = spg.astype(np.float64).reshape(-1)
    if spg.size != n_videos:
        raise TokenError(f"second_per_grid_ts has {spg.size} values for {n_videos} video_grid_thw rows")
    if not np.all(np.isfinite(spg)) or np.any(spg <= 0):
        raise TokenError(f"second_per_grid_ts must be finite and > 0; got {spg.tolist()}")
    return spg


class BatchRuns:
    """The runs of equal token type of a whole ``[B, L]`` batch, found in one vectorised pass over it
    (rows flattened end to end); a row's runs are then a slice of them, cut where its valid tokens lie."""

    def __init__(self, types: np.ndarray) -> None:
        flat = types.reshape(-1)
        after = flat[1:]
        last = (after != flat[:-1]).nonzero()[0]  # c: a run ends at token c, the next begins at c + 1
        self.length = types.shape[1]
        self.kinds: list[int] = after[last].tolist()
        self.last: list[int] = last.tolist()
        self.first_kind = flat.item(0) if flat.size else 0

    def within(self, top: int) -> bool:
        """Whether every type lies in ``0..top``: each value of the batch is the kind of some run, so
        the runs' kinds bound it without another pass over the batch."""
        kinds = self.kinds
        return 0 <= self.first_kind <= top and (not kinds or (min(kinds) >= 0 and max(kinds) <= top))

    def row(self, row: int, first: int, last: int) -> TokenRuns:
        """The runs of ``types[row, first:last]``, their starts and stops counted from ``first``."""
        if last <= first:
            return [], [], []
        base = row * self.length + first
        ends = self.last  # the run starts are these plus one: the shift goes into the bounds and ``inner``
        lo = bisect_right(ends, base - 1)
        hi = bisect_left(ends, base + last - first - 1, lo)
        base -= 1
        inner = [c - base for c in ends[lo:hi]]
        kinds = self.kinds
        return [0, *inner], [*inner, last - first], [kinds[lo - 1] if lo else self.first_kind, *kinds[lo:hi]]


class PadRuns:
    """The runs of image and video tokens of a whole ``[B, L]`` batch of token ids, marked by the two
    placeholder ids; every other id is text. It has the :meth:`BatchRuns.row` interface.

    Two comparisons give one byte per token for each modality; a row's runs are then found by byte
    searches (``bytes.find``, C ``memchr``) from one run boundary to the next, a few calls a run. This
    touches fewer numpy code paths than a 0/1/2 types array, its changes and their kinds (four ufunc
    calls, a fancy index and two lists), and the code paths a call touches are what it costs after
    other work has evicted the caches."""

    def __init__(self, ids: np.ndarray, image_id: int, video_id: int) -> None:
        flat = ids.reshape(-1)
        self.length = ids.shape[1]
        self.image = (flat == image_id).tobytes()  # one byte a token: 1 at an image placeholder
        self.video = (flat == video_id).tobytes()

    def row(self, row: int, first: int, last: int) -> TokenRuns:
        """The runs of row ``row``'s tokens ``first:last``, their starts and stops counted from ``first``."""
        lo = row * self.length + first
        hi = lo + last - first
        image, video = self.image, self.video
        starts: list[int] = []
        stops: list[int] = []
        kinds: list[int] = []
        at = lo
        next_image = image.find(1, lo, hi) % (hi + 1)  # -1 (none) becomes hi: both end the row
        next_video = video.find(1, lo, hi) % (hi + 1)
        while at < hi:
            begin = next_image if next_image < next_video else next_video
            if begin > at:  # text up to the next placeholder
                starts.append(at - lo)
                stops.append(begin - lo)
                kinds.append(0)
                at = begin
                if at == hi:
                    break
            if at == next_image:
                end = image.find(0, at, hi) % (hi + 1)
                next_image = image.find(1, end, hi) % (hi + 1)
                kinds.append(1)
            else:
                end = video.find(0, at, hi) % (hi + 1)
                next_video = video.find(1, end, hi) % (hi + 1)
                kinds.append(2)
            starts.append(at - lo)
            stops.append(end - lo)
            at = end
        return starts, stops, kinds


class TokenInputs(NamedTuple):
    """What the token-id interface hands a layout engine: validated ids, mask and type ids, the grids as
    given, and the resolved rules."""

    ids: np.ndarray  # integer [B, L]
    mask: np.ndarray | None  # 0/1 (integer or bool) [B, L], or None: every token is valid
    mask_runs: BatchRuns | None  # the runs of ``mask``
    types: np.ndarray | None  # integer [B, L] mm_token_type_ids (values not checked yet), or None
    image_grid_thw: Any
    video_grid_thw: Any
    second_per_grid_ts: Any
    images_per_sample: Any
    audio_seqlens: Any
    use_audio_in_video: bool | None
    rules: LayoutRules
    pad_position: Any
    out: np.ndarray | None = None  # the caller's [A, B, L] buffer for the positions, or None: allocate


def positions_buffer(out: Any, shape: tuple[int, ...], lay: LayoutRules) -> np.ndarray | None:
    """The caller's buffer ``out`` for positions of ``shape`` ``[A, B, L]`` under ``lay``, validated (its
    shape, the rules' dtype: int64, float32 under fractional time, and writeable); a CPU torch tensor is
    read as the numpy array sharing its memory. ``None`` stays ``None``."""
    if out is None:
        return None
    if getattr(out, "is_cpu", True) is False:
        raise TokenError("out must live on the CPU here (get_rope_index takes a tensor on any device)")
    arr = as_numpy(out, "out")
    assert arr is not None
    dtype = np.dtype(np.float32 if lay.fractional_time else np.int64)
    if arr.shape != shape or arr.dtype != dtype:
        raise TokenError(
            f"out must be a {dtype} array of shape {list(shape)} ([axes, batch, length]); "
            f"got {arr.dtype} {list(arr.shape)}"
        )
    if not arr.flags.writeable:
        raise TokenError("out must be writeable")
    return arr


def read_token_inputs(
    input_ids: Any,
    attention_mask: Any,
    mm_token_type_ids: Any,
    image_grid_thw: Any,
    video_grid_thw: Any,
    second_per_grid_ts: Any,
    images_per_sample: Any,
    audio_seqlens: Any,
    use_audio_in_video: bool | None,
    lay: LayoutRules,
    pad_position: Any,
    out: Any = None,
) -> TokenInputs:
    """Validate ``input_ids``, ``attention_mask``, the shape and dtype of ``mm_token_type_ids`` (their
    values are checked by the engine's scan) and the caller's buffer ``out`` (see
    :func:`positions_buffer`); the grids pass as given."""
    ids = as_numpy(input_ids, "input_ids", ndim=2)
    assert ids is not None
    if ids.dtype.kind not in "iu":
        raise TokenError(f"input_ids must hold integer token ids; got dtype {ids.dtype}")
    mask = as_numpy(attention_mask, "attention_mask")
    mask_runs = None
    if mask is not None:
        if mask.shape != ids.shape:
            raise TokenError(
                f"attention_mask must have the shape of input_ids {tuple(ids.shape)}; got {tuple(mask.shape)}"
            )
        if mask.dtype.kind not in "biu":
            if not np.all((mask == 0) | (mask == 1)):
                raise TokenError("attention_mask must hold only 0 and 1")
            mask = mask.astype(bool)
        # a mask of ones (no padding: the usual batch of one) is dropped after one comparison, every
        # token being valid (a zero byte searched for in the comparison's bytes: after other work has
        # evicted the caches, a reduction such as ``.all()`` costs more than the comparison itself);
        # any other is read as it is (an integer mask without a bool copy) in one pass that finds its
        # runs, which bound its values (each value is some run's kind) and give every row's layout
        if b"\0" not in (mask == 1).tobytes():
            mask = None
        else:
            mask_runs = BatchRuns(mask)
            if not mask_runs.within(1):
                raise TokenError("attention_mask must hold only 0 and 1")
    types = as_numpy(mm_token_type_ids, "mm_token_type_ids")
    if types is not None:
        if types.shape != ids.shape:
            raise TokenError(
                f"mm_token_type_ids must have the shape of input_ids {tuple(ids.shape)}; got {tuple(types.shape)}"
            )
        if types.dtype.kind not in "iu":
            raise TokenError(TYPES_ERROR)
    return TokenInputs(
        ids,
        mask,
        mask_runs,
        types,
        image_grid_thw,
        video_grid_thw,
        second_per_grid_ts,
        images_per_sample,
        audio_seqlens,
        use_audio_in_video,
        lay,
        pad_position,
        positions_buffer(out, (lay.num_axes, *ids.shape), lay),
    )


def check_type_values(types: np.ndarray | None) -> None:
    """Refuse type ids outside 0 (text), 1 (image), 2 (video) (a :class:`~mrope.TokenError`)."""
    if types is not None and types.size and _unsigned(types).max() > 2:
        raise TokenError(TYPES_ERROR)


__all__ = [
    "TYPES_ERROR",
    "BatchRuns",
    "PadRuns",
    "TokenInputs",
    "TokenRuns",
    "as_numpy",
    "check_type_values",
    "grid_rows",
    "grid_rows_array",
    "positions_buffer",
    "read_token_inputs",
    "seconds_per_grid",
]
