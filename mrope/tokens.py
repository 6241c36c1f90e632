"""The token-id interface: ``get_rope_index``, a drop-in for the transformers method.

A sequence arrives as token ids with runs of placeholder tokens (``<|image_pad|>``, ``<|video_pad|>``)
and one flat list of grids per modality, shared by the whole batch and consumed in order. Vision runs
are found either by the placeholder ids (the transformers 4.x token scan) or from
``mm_token_type_ids`` (0 text, 1 image, 2 video; the transformers 5.x form). Every run must be
covered exactly by whole grids: a mismatch is a :class:`~mrope.TokenError` that names the run, the
grid and the counts, never an IndexError from deep inside.

The coordinates themselves come from the same planner and filler as :func:`mrope.build_positions`,
so the two interfaces cannot drift apart.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mrope.builder import (
    Block,
    TextRun,
    fill_pieces,
    fill_sequence_pieces,
    target_positions,
    temporal_index,
    untiled_block,
)
from mrope.canvas import canvas_row
from mrope.errors import LayoutError, TokenError
from mrope.models import ModelLike, resolve_rules
from mrope.rules import LayoutRules

if TYPE_CHECKING:
    import torch


def _as_numpy(value: Any, name: str, ndim: int | None = None) -> np.ndarray | None:
    """``value`` as a numpy array, sharing memory with a CPU torch tensor (no copy)."""
    if value is None:
        return None
    arr = value
    if not isinstance(arr, np.ndarray):
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
            try:
                arr = value.numpy()  # a view of a CPU tensor without grad
            except (RuntimeError, TypeError):  # it requires grad, or lives on another device
                arr = value.detach().cpu().numpy()
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


def _grid_rows(value: Any, name: str) -> list[list[int]]:
    """A validated ``[n, 3]`` grid array (t, h, w, every dim >= 1) as ``n`` Python lists."""
    rows = None
    if hasattr(value, "detach") and hasattr(value, "cpu") and value.dim() == 2 and value.shape[1] == 3:
        rows = value.tolist()  # an integer torch tensor straight to Python ints (a tensor holds one dtype)
        if not rows or type(rows[0][0]) is not int:
            rows = None
    if rows is None:
        arr = _as_numpy(value, name)
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


def _grids(value: Any, name: str) -> np.ndarray:
    """:func:`_grid_rows` as an int64 ``[n, 3]`` array."""
    return np.array(_grid_rows(value, name), dtype=np.int64).reshape(-1, 3)


def _seconds_per_grid(value: Any, n_videos: int) -> np.ndarray | None:
    """``second_per_grid_ts`` as float64 ``[n_videos]`` seconds per temporal patch, or ``None``."""
    spg = _as_numpy(value, "second_per_grid_ts")
    if spg is None:
        return None
    spg = spg.astype(np.float64).reshape(-1)
    if spg.size != n_videos:
        raise TokenError(f"second_per_grid_ts has {spg.size} values for {n_videos} video_grid_thw rows")
    if not np.all(np.isfinite(spg)) or np.any(spg <= 0):
        raise TokenError(f"second_per_grid_ts must be finite and > 0; got {spg.tolist()}")
    return spg


class _GridQueue:
    """One modality's grids, consumed in order across the batch."""

    def __init__(
        self,
        name: str,
        rows: list[list[int]],
        merge: int,
        spg: list[float] | None,
        temporal_merge: int = 1,
        newline: int = 0,
    ) -> None:
        self.name = name
        self.rows = rows
        self.spg = spg
        self.next = 0
        tokens = self.tokens = []  # placeholder tokens of each grid: merged frames of H' rows of W' (+1)
        for i, (t, h, w) in enumerate(rows):
            if h % merge or w % merge:
                raise TokenError(
                    f"{name}[{i}] = {[t, h, w]}: h and w must be multiples of the merge size {merge}"
                )
            if t % temporal_merge:
                raise TokenError(
                    f"{name}[{i}] = {[t, h, w]}: t must be a multiple of the temporal merge size {temporal_merge}"
                )
            tokens.append(t // temporal_merge * (h // merge) * (w // merge + newline))

    def take(self, run_len: int, row: int, at: int) -> list[int]:
        """Indices of the grids that exactly fill a run of ``run_len`` placeholder tokens."""
        used: list[int] = []
        left = run_len
        while left > 0:
            if self.next >= len(self.rows):
                raise TokenError(
                    f"row {row}, {self.name[:5]} run at valid token {at}: {run_len} placeholder tokens need "
                    f"more {self.name} grids; only {len(self.rows)} given, all used ({left} tokens left uncovered)"
                )
            need = self.tokens[self.next]
            if need > left:
                raise TokenError(
                    f"row {row}, {self.name[:5]} run at valid token {at}: {self.name}[{self.next}] = "
                    f"{self.rows[self.next]} needs {need} placeholder tokens, but the run has {left} left "
                    f"(of {run_len})"
                )
            used.append(self.next)
            self.next += 1
            left -= need
        return used

    def take_one(self, run_len: int, row: int, at: int) -> tuple[int, int]:
        """The next grid, as ``(h, w)`` patches, for a crop of exactly ``run_len`` tokens (the canvas rule)."""
        if self.next >= len(self.rows):
            raise TokenError(
                f"row {row}, crop at valid token {at}: {run_len} tokens need one more {self.name} row; only "
                f"{len(self.rows)} given, all used"
            )
        g = self.next
        if self.tokens[g] != run_len or self.rows[g][0] != 1:
            raise TokenError(
                f"row {row}, crop at valid token {at}: the canvas rule takes one (1, h, w) {self.name} row "
                f"per crop of h*w/merge^2 tokens; {self.name}[{g}] = {self.rows[g]} for a crop of {run_len}"
            )
        self.next += 1
        return self.rows[g][1], self.rows[g][2]

    def check_all_used(self) -> None:
        if self.next != len(self.rows):
            raise TokenError(
                f"{len(self.rows)} {self.name} rows given but the placeholder runs use {self.next}"
            )


def _take_bordered(queue: _GridQueue, run_len: int, row: int, at: int) -> tuple[int, bool]:
    """The one grid of an image run under the ``grid_border`` rule, and whether the run holds the two
    border tokens (``H' * (W' + 1) + 2`` tokens) or the grid alone."""
    if queue.next >= len(queue.rows):
        raise TokenError(
            f"row {row}, image run at valid token {at}: {run_len} placeholder tokens need one more "
            f"{queue.name} row; only {len(queue.rows)} given, all used"
        )
    need = queue.tokens[queue.next]
    if run_len not in (need, need + 2):
        raise TokenError(
            f"row {row}, image run at valid token {at}: {queue.name}[{queue.next}] = {queue.rows[queue.next]} "
            f"needs {need} grid tokens ({need + 2} with the two border tokens), but the run has {run_len}"
        )
    queue.next += 1
    return queue.next - 1, run_len == need + 2


def _runs_of(row_types: np.ndarray, n: int) -> tuple[list[int], list[int], list[int]]:
    """Starts, stops and 0/1/2 kinds of the runs of equal type in one row of ``n`` token types."""
    if not n:
        return [], [], []
    change = (np.flatnonzero(row_types[1:] != row_types[:-1]) + 1).tolist()
    starts = [0, *change]
    return starts, [*change, n], row_types[starts].tolist()


class _BatchRuns:
    """The runs of equal token type of a whole ``[B, L]`` batch, found in one vectorised pass over it
    (rows flattened end to end); a row's runs are then a slice of them, cut where its valid tokens lie."""

    def __init__(self, types: np.ndarray) -> None:
        flat = types.reshape(-1)
        change = (flat[1:] != flat[:-1]).nonzero()[0]
        change += 1
        self.length = types.shape[1]
        self.kinds: list[int] = flat[change].tolist()
        self.change: list[int] = change.tolist()
        self.first_kind = int(flat[0]) if flat.size else 0

    def within(self, top: int) -> bool:
        """Whether every type lies in ``0..top``: each value of the batch is the kind of some run, so
        the runs' kinds bound it without another pass over the batch."""
        kinds = self.kinds
        return 0 <= self.first_kind <= top and (not kinds or (min(kinds) >= 0 and max(kinds) <= top))

    def row(self, row: int, first: int, last: int) -> tuple[list[int], list[int], list[int]]:
        """The runs of ``types[row, first:last]``, their starts and stops counted from ``first``."""
        if last <= first:
            return [], [], []
        base = row * self.length + first
        change = self.change
        lo = bisect_right(change, base)
        hi = bisect_left(change, base + last - first, lo)
        inner = [c - base for c in change[lo:hi]]
        kinds = self.kinds
        return [0, *inner], [*inner, last - first], [kinds[lo - 1] if lo else self.first_kind, *kinds[lo:hi]]


def _row_pieces(
    runs: tuple[list[int], list[int], list[int]],
    row: int,
    images: _GridQueue,
    videos: _GridQueue,
    lay: LayoutRules,
) -> list[TextRun | Block]:
    """Text runs and vision blocks of one row, from its runs of 0/1/2 token types."""
    pieces: list[TextRun | Block] = []
    merge = lay.merge_size
    blocks = _BLOCKS if len(_BLOCKS) < 4096 else {}
    rule_key = (lay.spatial, lay.crop, lay.temporal_merge_size, lay.row_newline, lay.frame_block)
    bordered_rule = lay.grid_border
    temporal, temporal_merge = lay.temporal, lay.temporal_merge_size
    for a, z, kind in zip(*runs, strict=True):
        if kind == 0:
            pieces.append(TextRun(z - a, 0, "text", -1))
            continue
        queue = images if kind == 1 else videos
        bordered = False
        g = queue.next
        if bordered_rule and kind == 1:
            g, bordered = _take_bordered(queue, z - a, row, a)
            taken: Sequence[int] = (g,)
        elif g < len(queue.rows) and queue.tokens[g] == z - a:  # one grid fills the run: the usual case
            queue.next = g + 1
            taken = (g,)
        else:
            taken = queue.take(z - a, row, a)
        for g in taken:
            t, h, w = queue.rows[g]
            if kind == 2:
                t //= temporal_merge
            if kind == 1 or temporal == "index":
                time_key: Any = t
            elif temporal == "timestamps":
                time_key = 0
            else:
                time_key = (t, float(queue.spg[g]), lay.tokens_per_second, lay.seconds_grouping)  # type: ignore[index]
            # blocks are immutable here; the same grid under the same rules is the same block
            key = (time_key, h // merge, w // merge, rule_key)
            block = blocks.get(key)
            if block is None:
                if time_key == 0:
                    tau = _ZERO
                elif isinstance(time_key, int):
                    tau = np.arange(t, dtype=np.int64)
                else:
                    tau = temporal_index(t, lay, time_key[1])
                block = blocks[key] = untiled_block((t, h // merge, w // merge), tau, lay, "image", -1, 0)
            if bordered:
                pieces.append(TextRun(1, 0, "wrapper", -1))
                pieces.append(block)
                pieces.append(TextRun(1, 0, "wrapper", -1))
            else:
                pieces.append(block)
    return pieces


def _wrapped_video_types(row_ids: np.ndarray, pad_id: int, lay: LayoutRules) -> np.ndarray:
    """0/1/2 token types when images and videos share one pad id (GLM-4.1V): pads after more
    ``video_start_id`` than ``video_end_id`` tokens are video (2), the others image (1), as the
    processor's ``create_mm_token_type_ids`` decides."""
    inside = np.cumsum(row_ids == lay.video_start_id) > np.cumsum(row_ids == lay.video_end_id)
    pads = row_ids == pad_id
    return (pads.view(np.int8) + (pads & inside).view(np.int8)).astype(np.int8)


def _wrapped_types(row_ids: np.ndarray, lay: LayoutRules) -> tuple[np.ndarray, int]:
    """Token types of one row under the ``between_wrappers`` image rule: 1 for the tokens strictly
    between each ``vision_start_id`` and the next ``vision_end_id``; also how many such images.

    A start with no end after it (the start of an image to generate) leaves its tokens as text."""
    types = np.zeros(row_ids.shape[0], dtype=np.int8)
    starts = np.flatnonzero(row_ids == lay.vision_start_id).tolist()
    ends = np.flatnonzero(row_ids == lay.vision_end_id).tolist()
    if len(ends) > len(starts) or any(e <= s for s, e in zip(starts, ends, strict=False)):
        raise TokenError(
            f"image wrappers out of order: vision_start_id {lay.vision_start_id} at {starts}, "
            f"vision_end_id {lay.vision_end_id} at {ends}"
        )
    for k, (s, e) in enumerate(zip(starts, ends, strict=False)):
        if k + 1 < len(starts) and starts[k + 1] < e:
            raise TokenError(
                f"image wrappers nest: a vision_start_id at {starts[k + 1]} before the end at {e}"
            )
        types[s + 1 : e] = 1
    return types, len(ends)


_TYPES_ERROR = "mm_token_type_ids must hold 0 (text), 1 (image) or 2 (video)"
_ZERO = np.zeros(1, dtype=np.int64)
_ZERO.flags.writeable = False
_BLOCKS: dict[tuple, Block] = {}


def rope_index(
    input_ids: Any,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    attention_mask: Any = None,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    second_per_grid_ts: Any = None,
    mm_token_type_ids: Any = None,
    pad_position: int | None = None,
    images_per_sample: Any = None,
    convention: str = "released",
    audio_seqlens: Any = None,
    use_audio_in_video: bool | None = None,
    second_per_grids: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The numpy core of :func:`get_rope_index`.

    Returns:
        ``(position_ids int64 [A, B, L], deltas int64 [B])``; A is ``rules.num_axes`` (3: t, h, w);
        float32 both for fractional-time rules (Qwen3-Omni).
    """
    lay = resolve_rules(model, rules, convention)
    if second_per_grids is not None:  # the omni models' name for it
        if second_per_grid_ts is not None:
            raise TokenError("pass second_per_grid_ts or second_per_grids, not both")
        second_per_grid_ts = second_per_grids
    if not lay.has_audio and (audio_seqlens is not None or use_audio_in_video):
        raise TokenError(
            f"audio_seqlens / use_audio_in_video given, but the {lay.name!r} rules have no audio"
        )
    out, deltas, _ = _rope_index_full(
        input_ids,
        image_grid_thw,
        video_grid_thw,
        attention_mask,
        lay,
        second_per_grid_ts,
        mm_token_type_ids,
        lay.pad_position if pad_position is None else pad_position,
        images_per_sample,
        audio_seqlens,
        use_audio_in_video,
    )
    return out, deltas


def generation_index(
    input_ids: Any,
    image_grid_thw: Any,
    attention_mask: Any = None,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    images_per_sample: Any = None,
) -> np.ndarray:
    """Decode-time positions of the images a model generates (rules with ``generates_images``,
    GLM-Image): per row, the grids left after the prompt's images are generated last grid first, each
    as a 2-D block starting one past the prompt's largest position, then one end marker.

    Returns:
        int64 ``[B, 3, G]``, rows shorter than the longest repeat their last column (how GLM-Image
        caches them); step ``k`` of decoding row ``b`` uses ``[b, :, k]``.
    """
    lay = resolve_rules(model, rules)
    if not lay.generates_images:
        raise TokenError(f"the {lay.name!r} rules do not generate images (generates_images=False)")
    _, _, generation = _rope_index_full(
        input_ids,
        image_grid_thw,
        None,
        attention_mask,
        lay,
        None,
        None,
        lay.pad_position,
        images_per_sample,
    )
    rows = [g if g is not None else np.zeros((3, 0), dtype=np.int64) for g in generation]
    width = max(g.shape[1] for g in rows)
    out = np.zeros((len(rows), 3, width), dtype=np.int64)
    for r, g in enumerate(rows):
        if g.shape[1]:
            out[r, :, : g.shape[1]] = g
            out[r, :, g.shape[1] :] = g[:, -1:]
    return out


def _valid_spans(mask_runs: _BatchRuns | None, b: int, length: int) -> list[tuple[int, int, bool]]:
    """Per row, where its valid tokens lie: ``(first, last, holed)``, the slice ``[first, last)`` that
    holds them and whether masked tokens lie between them (more than one run of ones).

    ``mask_runs`` are the runs of the validated 0/1 ``[B, L]`` mask (``None``: every token is valid):
    a row's layout, padded on either side or not, is read from its runs without another pass."""
    if mask_runs is None:
        return [(0, length, False)] * b
    spans: list[tuple[int, int, bool]] = []
    for row in range(b):
        starts, stops, kinds = mask_runs.row(row, 0, length)
        ones = [k for k, kind in enumerate(kinds) if kind]
        if not ones:
            spans.append((0, 0, False))
        else:
            spans.append((starts[ones[0]], stops[ones[-1]], len(ones) > 1))
    return spans


def _rope_index_full(
    input_ids: Any,
    image_grid_thw: Any,
    video_grid_thw: Any,
    attention_mask: Any,
    lay: LayoutRules,
    second_per_grid_ts: Any,
    mm_token_type_ids: Any,
    pad_position: int,
    images_per_sample: Any,
    audio_seqlens: Any = None,
    use_audio_in_video: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None]]:
    ids = _as_numpy(input_ids, "input_ids", ndim=2)
    assert ids is not None
    if ids.dtype.kind not in "iu":
        raise TokenError(f"input_ids must hold integer token ids; got dtype {ids.dtype}")
    b, length = ids.shape
    mask = _as_numpy(attention_mask, "attention_mask")
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
        # one pass finds the mask's runs: they bound its values (each value is some run's kind) and
        # give every row's layout; an integer mask is read as it is, without a bool copy
        mask_runs = _BatchRuns(mask)
        if not mask_runs.within(1):
            raise TokenError("attention_mask must hold only 0 and 1")
    # rules whose rows are scanned one by one (their own token types); the others take the batch's runs
    per_row_scan = lay.positions_base == "canvas" or lay.image_span == "between_wrappers"
    types = _as_numpy(mm_token_type_ids, "mm_token_type_ids")
    if types is not None:
        if types.shape != ids.shape:
            raise TokenError(
                f"mm_token_type_ids must have the shape of input_ids {tuple(ids.shape)}; got {tuple(types.shape)}"
            )
        if types.dtype.kind not in "iu":
            raise TokenError(_TYPES_ERROR)
        if (per_row_scan or lay.has_audio) and types.size and _unsigned(types).max() > 2:
            raise TokenError(_TYPES_ERROR)  # (otherwise checked on the batch's runs, below)
    if lay.has_audio:  # the omni token scan (audio, time-aligned video); it takes no type ids
        out, deltas = _omni_rope_index(
            ids,
            None if mask is None else mask.astype(bool, copy=False),
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_seqlens,
            lay,
            pad_position,
            use_audio_in_video,
        )
        return out, deltas, [None] * b

    merge = lay.merge_size
    newline = int(lay.row_newline)
    image_grids = _grid_rows(image_grid_thw, "image_grid_thw")
    per_sample = _as_numpy(images_per_sample, "images_per_sample")
    if per_sample is not None:
        per_sample = per_sample.reshape(-1)
        if (
            per_sample.dtype.kind not in "iu"
            or per_sample.size != b
            or np.any(per_sample < 0)
            or int(per_sample.sum()) != len(image_grids)
        ):
            raise TokenError(
                f"images_per_sample must hold {b} counts >= 0 summing to the {len(image_grids)} "
                f"image_grid_thw rows; got {per_sample.tolist()}"
            )
        bounds = np.concatenate([[0], np.cumsum(per_sample)]).tolist()
        row_images = [
            _GridQueue("image_grid_thw", image_grids[bounds[r] : bounds[r + 1]], merge, None, 1, newline)
            for r in range(b)
        ]
    else:
        if lay.generates_images and b > 1 and len(image_grids):
            raise TokenError(
                f"the {lay.name!r} rules generate images: with {b} rows, pass images_per_sample (the "
                "processor's count of grids per row, images to generate included)"
            )
        shared = _GridQueue("image_grid_thw", image_grids, merge, None, 1, newline)
        row_images = [shared] * b
    videos_grid = _grid_rows(video_grid_thw, "video_grid_thw")
    if second_per_grid_ts is None:
        spg_list = [1.0] * len(videos_grid)
    else:
        spg_list = _seconds_per_grid(second_per_grid_ts, len(videos_grid)).tolist()  # type: ignore[union-attr]
    if lay.temporal == "timestamps":
        # one (1, H, W) block per temporal patch, as the model splits it
        spg_list = [x for (t, _, _), x in zip(videos_grid, spg_list, strict=True) for _ in range(t)]
        videos_grid = [[1, h, w] for t, h, w in videos_grid for _ in range(t)]
    videos = _GridQueue("video_grid_thw", videos_grid, merge, spg_list, lay.temporal_merge_size, newline)
    if lay.positions_base == "sequence" and len(videos_grid):
        raise TokenError(f"the {lay.name!r} rules (sequence positions) take images only; got video grids")

    axes = lay.num_axes
    out = np.empty((axes, b, length), dtype=np.int64)
    deltas = np.zeros(b, dtype=np.int64)
    generation: list[np.ndarray | None] = [None] * b
    image_id, video_id = lay.image_pad_id, lay.video_pad_id
    shared_id = image_id == video_id  # GLM-4.1V: video frames carry the image id inside a video wrapper
    if types is None and not shared_id and lay.image_span != "between_wrappers":
        # 0 text, 1 image, 2 video for the whole batch at once (int8 adds; an int8 shift costs more)
        types = (ids == video_id).view(np.int8)
        types += types  # in place: the comparison's own buffer
        types += (ids == image_id).view(np.int8)
    batch_runs = None if per_row_scan or types is None else _BatchRuns(types)
    if batch_runs is not None and mm_token_type_ids is not None and not batch_runs.within(2):
        raise TokenError(_TYPES_ERROR)
    image_index = 0
    for row, (first, last, holed) in enumerate(_valid_spans(mask_runs, b, length)):
        # where the row's positions go: a view of its slice when its valid tokens are contiguous
        if first:
            out[:, row, :first] = pad_position
        if last < length:
            out[:, row, last:] = pad_position
        images = row_images[row]
        valid = np.flatnonzero(mask[row]) if holed else None  # type: ignore[index]
        if valid is None:
            n = last - first
            target = out[:, row, first:last]
            if batch_runs is not None:
                runs = batch_runs.row(row, first, last)
            else:
                row_ids, row_types = ids[row, first:last], None if types is None else types[row, first:last]
        else:
            n = len(valid)
            row_ids, row_types = ids[row, valid], None if types is None else types[row, valid]
            out[:, row, first:last] = pad_position  # the masked slots between valid ones
            target = None
            if batch_runs is not None:
                runs = _runs_of(row_types, n)
        if batch_runs is None:
            if lay.image_span == "between_wrappers":
                row_types, _ = _wrapped_types(row_ids, lay)
            elif row_types is None:  # shared pad id: the video wrappers tell videos from images
                row_types = _wrapped_video_types(row_ids, image_id, lay)
            runs = _runs_of(row_types, n)
        dense = target if target is not None else np.empty((axes, n), dtype=np.int64)
        if lay.positions_base == "canvas":
            queues = {1: images, 2: videos}
            dense[:] = canvas_row(
                row_ids.tolist(),
                row_types.tolist(),
                lambda kind, at, count: queues[kind].take_one(count, row, at),  # noqa: B023
                lay,
            )
            top = int(dense.max()) if n else -1
        elif lay.positions_base == "sequence":
            pieces = _row_pieces(runs, row, images, videos, lay)
            top, image_index = fill_sequence_pieces(pieces, dense, None, None, image_index)
            if lay.image_index_scope == "sequence":
                image_index = 0
        else:
            top = fill_pieces(_row_pieces(runs, row, images, videos, lay), dense, None, None, lay.advance)
        if target is None:
            out[:, row, valid] = dense
        deltas[row] = top + 1 - n
        if lay.generates_images and (per_sample is not None or row == b - 1):
            # grids left after the row's images are the images the model will generate
            try:
                generation[row] = target_positions(top + 1, images.rows[images.next :], merge)
            except LayoutError as exc:
                raise TokenError(f"row {row}: {exc}") from None
            images.next = len(images.rows)
    if lay.generates_images:
        deltas[:] = 0
    for queue in row_images if per_sample is not None else row_images[:1]:  # one shared queue, or one per row
        queue.check_all_used()
    videos.check_all_used()
    return out, deltas, generation


def _omni_rope_index(
    ids: np.ndarray,
    mask: np.ndarray | None,
    image_grid_thw: Any,
    video_grid_thw: Any,
    second_per_grid_ts: Any,
    audio_seqlens: Any,
    lay: LayoutRules,
    pad_position: float,
    use_audio_in_video: bool | None,
) -> tuple[np.ndarray, np.ndarray]:
    from mrope.timeline import omni_rope_index

    videos = _grids(video_grid_thw, "video_grid_thw")
    spg = _seconds_per_grid(second_per_grid_ts, len(videos))
    seqlens = _as_numpy(audio_seqlens, "audio_seqlens")
    if seqlens is not None and seqlens.dtype.kind == "f":
        if not np.all(np.isfinite(seqlens)) or not np.all(seqlens == np.round(seqlens)):
            raise TokenError(f"audio_seqlens must hold integers (mel frames); got {seqlens.tolist()}")
        seqlens = seqlens.astype(np.int64)
    return omni_rope_index(
        ids,
        mask,
        _grids(image_grid_thw, "image_grid_thw"),
        videos,
        spg,
        seqlens,
        lay,
        pad_position,
        use_audio_in_video,
    )


def get_rope_index(
    input_ids: Any,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    attention_mask: Any = None,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    second_per_grid_ts: Any = None,
    mm_token_type_ids: Any = None,
    pad_position: int | None = None,
    images_per_sample: Any = None,
    convention: str = "released",
    audio_seqlens: Any = None,
    use_audio_in_video: bool | None = None,
    second_per_grids: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE position ids from token ids, like the transformers model method.

    Args:
        input_ids: int ``[B, L]`` (torch, numpy or nested lists).
        image_grid_thw: int ``[n_images, 3]`` encoder grids, in order, shared by the batch.
        video_grid_thw: int ``[n_videos, 3]``. For Qwen3-VL one row ``(T, H, W)`` per video, as its
            processor gives it; it is split into ``T`` blocks of ``(1, H, W)`` like the model does.
        attention_mask: 0/1 ``[B, L]``; positions are computed on valid tokens only.
        model: required (no default): a family name, a Hugging Face model_type, a repo id, a
            :class:`mrope.models.ModelFamily` or what :func:`mrope.from_pretrained` returns; ``rules``
            replaces or overrides its rules (see :class:`~mrope.LayoutRules`).
        second_per_grid_ts: float ``[n_videos]`` seconds per temporal patch (Qwen2.5-VL; default 1.0),
            used as float32 like the model does with the float32 tensor its processor hands over.
        mm_token_type_ids: int ``[B, L]`` 0 text / 1 image / 2 video (transformers 5.x form); when
            given, runs are taken from it instead of the placeholder ids.
        pad_position: value written at masked slots (default: the rules' ``pad_position``).
        images_per_sample: int ``[B]``: how many ``image_grid_thw`` rows belong to each row (GLM-Image's
            processor output, images to generate included); without it the grids are one queue.
        audio_seqlens: int ``[n_audios]`` mel-frame lengths of every audio clip in order, standalone or
            inside a video (omni families: ``feature_attention_mask.sum(-1)``, what the models take);
            ``None`` counts each clip's tokens from the ids.
        use_audio_in_video: omni families: whether videos carry their audio. The layout is read from
            the ids (a video whose vision_start is followed by audio_start carries audio); ``True`` with
            a video that carries none is an error, as the models would misplace it.
        second_per_grids: the omni models' name for ``second_per_grid_ts``.
        convention: ``"released"`` (official semantics) or ``"transformers5"`` (the family's own
            transformers 5.24 ``get_rope_index``: its advance and pad value).

    Returns:
        ``(position_ids, deltas)``: int64 torch ``[A, B, L]`` (A = ``rules.num_axes``) and ``[B, 1]``, on ``input_ids``' device
        when it is a torch tensor.
    """
    import torch

    try:
        pos, deltas = rope_index(
            input_ids,
            image_grid_thw,
            video_grid_thw,
            attention_mask,
            model=model,
            rules=rules,
            second_per_grid_ts=second_per_grid_ts,
            mm_token_type_ids=mm_token_type_ids,
            pad_position=pad_position,
            images_per_sample=images_per_sample,
            convention=convention,
            audio_seqlens=audio_seqlens,
            use_audio_in_video=use_audio_in_video,
            second_per_grids=second_per_grids,
        )
    except LayoutError as exc:  # a grid the layout rejects is a token-interface error here
        raise TokenError(str(exc)) from None
    # the numpy results become tensors without a copy; moved only when the ids live off the CPU
    pos_t = torch.from_numpy(pos)
    deltas_t = torch.from_numpy(deltas[:, None])
    if isinstance(input_ids, torch.Tensor) and not input_ids.is_cpu:
        pos_t, deltas_t = pos_t.to(input_ids.device), deltas_t.to(input_ids.device)
    return pos_t, deltas_t


__all__ = ["generation_index", "get_rope_index", "rope_index"]
