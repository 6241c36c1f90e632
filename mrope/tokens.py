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

from typing import TYPE_CHECKING, Any

import numpy as np

from mrope.builder import DEFAULT_PAD_POSITION, _Block, _Text, _untiled_block, fill_pieces, temporal_index
from mrope.errors import LayoutError, TokenError
from mrope.rules import LayoutRules, resolve_rules

if TYPE_CHECKING:
    import torch


def _as_numpy(value: Any, name: str, ndim: int | None = None) -> np.ndarray | None:
    if value is None:
        return None
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        cpu_plain = value.device.type == "cpu" and not value.requires_grad
        value = value.numpy() if cpu_plain else value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise TokenError(f"{name} must be an array of numbers; got {type(value).__name__}") from None
    if arr.dtype == object:
        raise TokenError(f"{name} must be a rectangular array of numbers")
    if ndim is not None and arr.ndim != ndim:
        raise TokenError(f"{name} must be {ndim}-D; got shape {tuple(arr.shape)}")
    return arr


def _grids(value: Any, name: str) -> np.ndarray:
    arr = _as_numpy(value, name)
    if arr is None or arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise TokenError(f"{name} must have shape [n, 3] (t, h, w); got {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise TokenError(f"{name} must hold integers; got {arr.tolist()}")
        arr = arr.astype(np.int64)
    for i, grid in enumerate(arr.tolist()):  # a handful of rows: Python beats numpy's per-call cost
        if min(grid) < 1:
            raise TokenError(f"{name}[{i}] = {grid}: every grid dim must be >= 1")
    return arr


class _GridQueue:
    """One modality's grids, consumed in order across the batch."""

    def __init__(self, name: str, grids: np.ndarray, merge: int, spg: np.ndarray | None) -> None:
        self.name = name
        self.grids = grids
        self.rows = grids.tolist()
        self.spg = spg
        self.next = 0
        for i, (t, h, w) in enumerate(self.rows):
            if h % merge or w % merge:
                raise TokenError(
                    f"{name}[{i}] = {[t, h, w]}: h and w must be multiples of the merge size {merge}"
                )
        self.tokens = [t * h * w // (merge * merge) for t, h, w in self.rows]

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

    def check_all_used(self) -> None:
        if self.next != len(self.rows):
            raise TokenError(
                f"{len(self.rows)} {self.name} rows given but the placeholder runs use {self.next}"
            )


def _row_pieces(
    row_types: np.ndarray, n: int, row: int, images: _GridQueue, videos: _GridQueue, lay: LayoutRules
) -> list[_Text | _Block]:
    """Text runs and vision blocks of one row, from its 0/1/2 token types."""
    pieces: list[_Text | _Block] = []
    if not n:
        return pieces
    change = (np.flatnonzero(row_types[1:] != row_types[:-1]) + 1).tolist()
    starts = [0, *change]
    stops = [*change, n]
    merge = lay.merge_size
    blocks = _BLOCKS if len(_BLOCKS) < 4096 else {}
    for a, z, kind in zip(starts, stops, row_types[starts].tolist(), strict=True):
        if kind == 0:
            pieces.append(_Text(z - a, 0, "text", -1))
            continue
        queue = images if kind == 1 else videos
        for g in queue.take(z - a, row, a):
            t, h, w = queue.rows[g]
            if kind == 1 or lay.temporal == "index":
                time_key: Any = t
            elif lay.temporal == "timestamps":
                time_key = 0
            else:
                time_key = (t, float(queue.spg[g]), lay.tokens_per_second)  # type: ignore[index]
            # blocks are immutable here; the same grid under the same rules is the same block
            key = (time_key, h // merge, w // merge, lay.spatial, lay.crop)
            block = blocks.get(key)
            if block is None:
                if time_key == 0:
                    tau = _ZERO
                elif isinstance(time_key, int):
                    tau = np.arange(t, dtype=np.int64)
                else:
                    tau = temporal_index(t, lay, time_key[1])
                block = blocks[key] = _untiled_block((t, h // merge, w // merge), tau, lay, "image", -1, 0)
            pieces.append(block)
    return pieces


_ZERO = np.zeros(1, dtype=np.int64)
_ZERO.flags.writeable = False
_BLOCKS: dict[tuple, _Block] = {}


def rope_index(
    input_ids: Any,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    attention_mask: Any = None,
    *,
    model: str = "qwen2-vl",
    rules: LayoutRules | dict[str, Any] | None = None,
    second_per_grid_ts: Any = None,
    mm_token_type_ids: Any = None,
    pad_position: int = DEFAULT_PAD_POSITION,
    audio_seqlens: Any = None,
    use_audio_in_video: bool | None = None,
    second_per_grids: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The numpy core of :func:`get_rope_index`.

    Returns:
        ``(position_ids int64 [3, B, L], deltas int64 [B])``; float32 both for fractional-time rules.
    """
    lay = resolve_rules(model, rules)
    ids = _as_numpy(input_ids, "input_ids", ndim=2)
    assert ids is not None
    if ids.dtype.kind not in "iu":
        raise TokenError(f"input_ids must hold integer token ids; got dtype {ids.dtype}")
    b, length = ids.shape
    mask = _as_numpy(attention_mask, "attention_mask")
    if mask is not None:
        if mask.shape != ids.shape:
            raise TokenError(
                f"attention_mask must have the shape of input_ids {tuple(ids.shape)}; got {tuple(mask.shape)}"
            )
        if mask.dtype.kind in "iu":  # two reductions, no temporaries (the common torch int64 mask)
            binary = not mask.size or (mask.min() >= 0 and mask.max() <= 1)
        else:
            binary = mask.dtype == bool or bool(np.all((mask == 0) | (mask == 1)))
        if not binary:
            raise TokenError("attention_mask must hold only 0 and 1")
        mask = mask.astype(bool, copy=False)
    types = _as_numpy(mm_token_type_ids, "mm_token_type_ids")
    if types is not None:
        if types.shape != ids.shape:
            raise TokenError(
                f"mm_token_type_ids must have the shape of input_ids {tuple(ids.shape)}; got {tuple(types.shape)}"
            )
        if types.dtype.kind not in "iu" or (types.size and not (types.min() >= 0 and types.max() <= 2)):
            raise TokenError("mm_token_type_ids must hold 0 (text), 1 (image) or 2 (video)")
    if second_per_grids is not None:  # the omni models' name for it
        if second_per_grid_ts is not None:
            raise TokenError("pass second_per_grid_ts or second_per_grids, not both")
        second_per_grid_ts = second_per_grids
    if lay.has_audio:  # the omni token scan (audio, time-aligned video); it takes no type ids
        return _omni_rope_index(
            ids,
            mask,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_seqlens,
            lay,
            pad_position,
            use_audio_in_video,
        )
    if audio_seqlens is not None or use_audio_in_video:
        raise TokenError(
            f"audio_seqlens / use_audio_in_video given, but the {lay.name!r} rules have no audio"
        )

    merge = lay.merge_size
    images = _GridQueue("image_grid_thw", _grids(image_grid_thw, "image_grid_thw"), merge, None)
    videos_raw = _grids(video_grid_thw, "video_grid_thw")
    spg = _as_numpy(second_per_grid_ts, "second_per_grid_ts")
    if spg is not None:
        spg = spg.astype(np.float64).reshape(-1)
        if spg.size != len(videos_raw):
            raise TokenError(
                f"second_per_grid_ts has {spg.size} values for {len(videos_raw)} video_grid_thw rows"
            )
        if not np.all(np.isfinite(spg)) or np.any(spg <= 0):
            raise TokenError(f"second_per_grid_ts must be finite and > 0; got {spg.tolist()}")
    else:
        spg = np.ones(len(videos_raw), dtype=np.float64)
    if lay.temporal == "timestamps":
        # one (1, H, W) block per temporal patch, as the model splits it
        reps = videos_raw[:, 0]
        videos_grid = np.repeat(videos_raw, reps, axis=0)
        videos_grid[:, 0] = 1
        spg = np.repeat(spg, reps)
    else:
        videos_grid = videos_raw
    videos = _GridQueue("video_grid_thw", videos_grid, merge, spg)

    out = np.empty((3, b, length), dtype=np.int64)
    deltas = np.zeros(b, dtype=np.int64)
    image_id, video_id = lay.image_pad_id, lay.video_pad_id
    for row in range(b):
        # the valid tokens, and where their positions go: a view when they are contiguous (one run of
        # ones, found with two argmax scans and a count instead of materialising the valid indices)
        valid = None
        if mask is None:
            sl = slice(0, length)
        else:
            row_mask = mask[row]
            n_valid = int(np.count_nonzero(row_mask))
            first = int(row_mask.argmax()) if n_valid else 0
            last = length - int(row_mask[::-1].argmax()) if n_valid else 0
            if last - first != n_valid:
                valid = np.flatnonzero(row_mask)
            sl = slice(first, last)
            out[:, row, :first] = pad_position
            out[:, row, last:] = pad_position
        if valid is None:
            row_ids, row_types = ids[row, sl], None if types is None else types[row, sl]
            target = out[:, row, sl]
        else:
            row_ids, row_types = ids[row, valid], None if types is None else types[row, valid]
            out[:, row, :] = pad_position
            target = None
        n = row_ids.shape[0]
        if row_types is None:
            # 0 text, 1 image, 2 video (int8 adds; a shift of int8 costs several times more)
            row_types = (row_ids == video_id).view(np.int8)
            row_types = row_types + row_types
            row_types += (row_ids == image_id).view(np.int8)
        pieces = _row_pieces(row_types, n, row, images, videos, lay)
        dense = target if target is not None else np.empty((3, n), dtype=np.int64)
        top = fill_pieces(pieces, dense, None, None, lay.advance)
        if target is None:
            out[:, row, valid] = dense
        deltas[row] = top + 1 - n
    images.check_all_used()
    videos.check_all_used()
    return out, deltas


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
    spg = _as_numpy(second_per_grid_ts, "second_per_grid_ts")
    if spg is not None:
        spg = spg.astype(np.float64).reshape(-1)
        if spg.size != len(videos):
            raise TokenError(
                f"second_per_grid_ts has {spg.size} values for {len(videos)} video_grid_thw rows"
            )
        if not np.all(np.isfinite(spg)) or np.any(spg <= 0):
            raise TokenError(f"second_per_grid_ts must be finite and > 0; got {spg.tolist()}")
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
    model: str = "qwen2-vl",
    rules: LayoutRules | dict[str, Any] | None = None,
    second_per_grid_ts: Any = None,
    mm_token_type_ids: Any = None,
    pad_position: int = DEFAULT_PAD_POSITION,
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
        model: preset name; ``rules`` replaces or overrides it (see :class:`~mrope.LayoutRules`).
        second_per_grid_ts: float ``[n_videos]`` seconds per temporal patch (Qwen2.5-VL; default 1.0).
        mm_token_type_ids: int ``[B, L]`` 0 text / 1 image / 2 video (transformers 5.x form); when
            given, runs are taken from it instead of the placeholder ids.
        pad_position: value written at masked slots.
        audio_seqlens: int ``[n_audios]`` mel-frame lengths of every audio clip in order, standalone or
            inside a video (omni families: ``feature_attention_mask.sum(-1)``, what the models take);
            ``None`` counts each clip's tokens from the ids.
        use_audio_in_video: omni families: whether videos carry their audio. The layout is read from
            the ids (a video whose vision_start is followed by audio_start carries audio); ``True`` with
            a video that carries none is an error, as the models would misplace it.
        second_per_grids: the omni models' name for ``second_per_grid_ts``.

    Returns:
        ``(position_ids, deltas)``: torch ``[3, B, L]`` and ``[B, 1]``, int64 (float32 for fractional
        time, Qwen3-Omni), on ``input_ids``' device when it is a torch tensor.
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
            audio_seqlens=audio_seqlens,
            use_audio_in_video=use_audio_in_video,
            second_per_grids=second_per_grids,
        )
    except LayoutError as exc:  # a grid the layout rejects is a token-interface error here
        raise TokenError(str(exc)) from None
    device = input_ids.device if isinstance(input_ids, torch.Tensor) else None
    pos_t = torch.from_numpy(pos)
    deltas_t = torch.from_numpy(deltas[:, None])
    if device is not None and device.type != "cpu":
        pos_t, deltas_t = pos_t.to(device), deltas_t.to(device)
    return pos_t, deltas_t


__all__ = ["get_rope_index", "rope_index"]
