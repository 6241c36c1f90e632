"""The omni token scan: a batch of token ids -> positions, as the omni models' own ``get_rope_index`` reads them.

Each row's valid tokens are parsed into omni pieces (text, images and videos between vision_start /
vision_end, audio between audio_start / audio_end, a video with its audio inside both), checked against
the grids and audio lengths given, and laid out by :func:`mrope._layout.omni_timeline.layout`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mrope._audio_grid import audio_tokens_from_frames, require_audio
from mrope._errors import LayoutError, TokenError
from mrope._layout.leniency import tolerate
from mrope._layout.omni_timeline import Piece, layout
from mrope._layout.token_inputs import (
    TokenInputs,
    as_numpy,
    check_type_values,
    grid_rows_array,
    seconds_per_grid,
)
from mrope._layout.token_scan import ScanResult
from mrope._rules import LayoutRules


class _Queue:
    """One list of per-item values consumed in order across the batch."""

    def __init__(self, name: str, values: list[Any]) -> None:
        self.name, self.values, self.next = name, values, 0

    def take(self, row: int, at: int, what: str) -> Any:
        if self.next >= len(self.values):
            raise TokenError(
                f"row {row}, {what} at valid token {at}: no {self.name} left ({len(self.values)} given, all used)"
            )
        self.next += 1
        return self.values[self.next - 1]

    def check_all_used(self) -> None:
        """Refuse values no block used (tolerated in lenient reading: the omni models index the values
        by the blocks they meet and never look at the rest)."""
        if self.next != len(self.values):
            tolerate(
                f"{len(self.values)} {self.name} given but the sequences use {self.next}",
                f"{self.name} that no block uses are ignored, as the model ignores them",
            )


def _row_pieces(
    row_ids: np.ndarray,
    row: int,
    rules: LayoutRules,
    images: _Queue,
    videos: _Queue,
    audios: _Queue | None,
    use_audio_in_video: bool | None,
) -> list[Piece]:
    """Parse one row's valid tokens into pieces (the omni models' token scan, with checks)."""
    vs, ve = rules.vision_start_id, rules.vision_end_id
    a_start, a_end, a_pad = rules.audio_start_id, rules.audio_end_id, rules.audio_pad_id
    i_pad, v_pad = rules.image_pad_id, rules.video_pad_id
    n = row_ids.shape[0]
    ids = row_ids.tolist()
    pieces: list[Piece] = []
    cursor = 0

    def text_until(stop: int) -> None:
        if stop > cursor:
            pieces.append(Piece("text", stop - cursor))

    def expect(at: int, token: int, what: str) -> None:
        if at >= n or ids[at] != token:
            got = "the end of the row" if at >= n else f"token {ids[at]}"
            raise TokenError(f"row {row}: expected {what} ({token}) at valid token {at}; got {got}")

    def run_of(start: int, token: int, count: int, what: str) -> None:
        seg = row_ids[start : start + count]
        if seg.shape[0] != count or not bool(np.all(seg == token)):
            bad = start + int(np.argmax(seg != token)) if seg.shape[0] else start
            raise TokenError(
                f"row {row}: {what} at valid token {start} needs {count} tokens {token}; the run breaks at "
                f"valid token {min(bad, n)} of {n}"
            )

    def audio_count(start: int, body_tokens: tuple[int, ...], what: str) -> int:
        if audios is not None:
            frames = int(audios.take(row, start, what))
            count = audio_tokens_from_frames(frames, rules)
            if count < 1:
                raise TokenError(
                    f"row {row}, {what} at valid token {start}: audio_seqlens {frames} gives {count} tokens"
                )
            return count
        k = start
        while k < n and ids[k] in body_tokens:
            k += 1
        return int(np.count_nonzero(row_ids[start:k] == a_pad))

    starts = np.flatnonzero((row_ids == vs) | (row_ids == a_start)).tolist()
    for p in starts:
        if p < cursor:
            continue
        nxt = ids[p + 1] if p + 1 < n else None
        if ids[p] == vs and nxt in (i_pad, v_pad):
            kind = "image" if nxt == i_pad else "video"
            queue = images if kind == "image" else videos
            grid, spg = queue.take(row, p, kind)
            m = rules.merge_size
            merged = (grid[0], grid[1] // m, grid[2] // m)
            count = merged[0] * merged[1] * merged[2]
            run_of(p + 1, nxt, count, f"{kind} {tuple(grid)}")
            end = p + 1 + count
            if end < n and ids[end] != ve:  # the model takes the token after the run as its vision_end
                tolerate(
                    f"row {row}: expected vision_end ({ve}) at valid token {end}; got token {ids[end]}",
                    "a token other than vision_end after an image or video run takes vision_end's "
                    "position, as the model places it",
                )
            else:
                expect(end, ve, "vision_end")
            if kind == "video" and use_audio_in_video:
                raise TokenError(
                    f"row {row}: use_audio_in_video=True, but the video at valid token {p} carries no audio "
                    "(its vision_start is not followed by audio_start); the model would misplace it"
                )
            text_until(p)
            pieces.append(Piece(kind, grid=merged, second_per_grid=spg))
            cursor = p + count + 2
        elif ids[p] == vs and nxt == a_start:
            grid, spg = videos.take(row, p, "video with audio")
            m = rules.merge_size
            merged = (grid[0], grid[1] // m, grid[2] // m)
            count = merged[0] * merged[1] * merged[2]
            n_audio = audio_count(p + 2, (v_pad, a_pad), "video with audio")
            body = row_ids[p + 2 : p + 2 + count + n_audio]
            nv, na = int(np.count_nonzero(body == v_pad)), int(np.count_nonzero(body == a_pad))
            if body.shape[0] != count + n_audio or nv != count or na != n_audio:
                raise TokenError(
                    f"row {row}: the video with audio at valid token {p} needs {count} video tokens "
                    f"({tuple(grid)}) and {n_audio} audio tokens; its body has {nv} and {na} "
                    f"(of {body.shape[0]} tokens)"
                )
            expect(p + 2 + count + n_audio, a_end, "audio_end")
            expect(p + 3 + count + n_audio, ve, "vision_end")
            text_until(p)
            pieces.append(Piece("av", n_audio, grid=merged, second_per_grid=spg))
            cursor = p + 4 + count + n_audio
        elif ids[p] == a_start and nxt == a_pad:
            n_audio = audio_count(p + 1, (a_pad,), "audio")
            run_of(p + 1, a_pad, n_audio, "audio")
            expect(p + 1 + n_audio, a_end, "audio_end")
            text_until(p)
            pieces.append(Piece("audio", n_audio))
            cursor = p + n_audio + 2
    text_until(n)
    _check_stray_placeholders(pieces, row_ids, row, rules)
    return pieces


def _check_stray_placeholders(pieces: list[Piece], row_ids: np.ndarray, row: int, rules: LayoutRules) -> None:
    """Refuse placeholders in a row's text. A model that finds blocks by their placeholder ids
    (``block_search="placeholder"``, Qwen2.5-Omni: ``input_tokens.index(image_token_id, st)``) takes the
    next placeholder id of a kind as a block's start while blocks of that kind remain, so it misplaces a
    stray id that such a block follows; a stray id no such block follows it reads as text. A model that
    finds blocks by their start ids (``"start"``, Qwen3-Omni) reads every stray id as text. Lenient reading
    tolerates the stray ids the model reads as text."""
    searched_by = {"image": ("image",), "video": ("video", "av"), "audio": ("audio", "av")}
    kinds = (("image", rules.image_pad_id), ("video", rules.video_pad_id), ("audio", rules.audio_pad_id))
    by_placeholder = rules.block_search == "placeholder"
    at = 0
    for k, pc in enumerate(pieces):
        if pc.kind == "text":
            chunk = row_ids[at : at + pc.n]
            for what, token in kinds:
                hits = np.flatnonzero(chunk == token)
                if not hits.size:
                    continue
                refusal = (
                    f"row {row}: {what} placeholder ({token}) at valid token {at + int(hits[0])} "
                    "outside a start / end block"
                )
                if by_placeholder and any(later.kind in searched_by[what] for later in pieces[k + 1 :]):
                    raise TokenError(f"{refusal}; the model would misplace it")
                tolerate(
                    refusal,
                    "image, video or audio placeholder ids outside a start / end block, where the model "
                    "finds no block by them, are read as text, as the model reads them",
                )
        at += pc.num_tokens


def omni_rope_index(
    ids: np.ndarray,
    mask: np.ndarray | None,
    image_grids: np.ndarray,
    video_grids: np.ndarray,
    second_per_grid: np.ndarray | None,
    audio_seqlens: np.ndarray | None,
    rules: LayoutRules,
    pad_position: float,
    use_audio_in_video: bool | None = None,
    as_text: bool = False,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The omni models' ``get_rope_index`` on token ids (validated ``[B, L]`` ids, bool mask or None);
    ``as_text``: every valid token gets text positions, whatever its id; written into ``out`` when given
    (a validated ``[3, B, L]`` buffer of the result's dtype).

    Returns:
        ``(positions [3, B, L], deltas [B])``: int64, or float32 under fractional time.
    """
    require_audio(rules, "omni_rope_index")
    b, length = ids.shape
    if len(video_grids) and second_per_grid is None:
        raise TokenError(
            f"{len(video_grids)} videos but no second_per_grid_ts (second_per_grids): the {rules.name!r} "
            "rules time video in seconds"
        )
    spg = second_per_grid.tolist() if second_per_grid is not None else []
    images = _Queue("image_grid_thw rows", [(g, 1.0) for g in image_grids.tolist()])
    videos = _Queue("video_grid_thw rows", list(zip(video_grids.tolist(), spg, strict=True)) if spg else [])
    for name, q in (("image_grid_thw", images), ("video_grid_thw", videos)):
        for k, (grid, _) in enumerate(q.values):
            if grid[1] % rules.merge_size or grid[2] % rules.merge_size:
                raise TokenError(
                    f"{name}[{k}] = {grid}: h and w must be multiples of the merge size {rules.merge_size}"
                )
    audios = None
    if audio_seqlens is not None:
        seq = audio_seqlens.reshape(-1)
        if seq.dtype.kind not in "iu" or bool(np.any(seq < 1)):
            raise TokenError(f"audio_seqlens must be positive ints (mel frames); got {seq.tolist()}")
        audios = _Queue("audio_seqlens values", seq.tolist())
    dtype = np.float32 if rules.fractional_time else np.int64
    if out is None:
        out = np.full((3, b, length), pad_position, dtype=dtype)
    else:
        out[...] = pad_position
    deltas = np.zeros(b, dtype=dtype)
    for row in range(b):
        valid = np.arange(length) if mask is None else np.flatnonzero(mask[row])
        row_ids = ids[row, valid]
        pieces = (
            [Piece("text", row_ids.shape[0])]
            if as_text
            else _row_pieces(row_ids, row, rules, images, videos, audios, use_audio_in_video)
        )
        try:
            pos, top, _ = layout(pieces, rules)
        except LayoutError as exc:
            raise TokenError(f"row {row}: {exc}") from None
        out[:, row, valid] = pos
        n = dtype(pos.shape[1])
        deltas[row] = dtype(top + dtype(1)) - n if pos.shape[1] else 0
    images.check_all_used()
    videos.check_all_used()
    if audios is not None:
        audios.check_all_used()
    return out, deltas


def scan_token_ids(inputs: TokenInputs) -> ScanResult:
    """Positions and deltas of a batch of token ids (the omni token scan: audio, time-aligned video; it
    reads no type ids but checks their values); no images to generate."""
    check_type_values(inputs.types)
    mask = inputs.mask
    videos = grid_rows_array(inputs.video_grid_thw, "video_grid_thw")
    spg = seconds_per_grid(inputs.second_per_grid_ts, len(videos))
    seqlens = as_numpy(inputs.audio_seqlens, "audio_seqlens")
    if seqlens is not None and seqlens.dtype.kind == "f":
        if not np.all(np.isfinite(seqlens)) or not np.all(seqlens == np.round(seqlens)):
            raise TokenError(f"audio_seqlens must hold integers (mel frames); got {seqlens.tolist()}")
        seqlens = seqlens.astype(np.int64)
    out, deltas = omni_rope_index(
        inputs.ids,
        None if mask is None else mask.astype(bool, copy=False),
        grid_rows_array(inputs.image_grid_thw, "image_grid_thw"),
        videos,
        spg,
        seqlens,
        inputs.rules,
        inputs.pad_position,
        inputs.use_audio_in_video,
        as_text=_gridless_vision(inputs),
        out=inputs.out,
    )
    return out, deltas, [None] * inputs.ids.shape[0]


def _gridless_vision(inputs: TokenInputs) -> bool:
    """Whether image or video placeholders come with neither ``image_grid_thw`` nor ``video_grid_thw``:
    refused, and tolerated in lenient reading, where the positions are text positions (Qwen2.5-Omni's
    ``get_rope_index`` lays out blocks only when a grid is given, else it numbers the valid tokens)."""
    if inputs.image_grid_thw is not None or inputs.video_grid_thw is not None:
        return False
    lay, ids = inputs.rules, inputs.ids
    vision = (ids == lay.image_pad_id) | (ids == lay.video_pad_id)
    if inputs.mask is not None:
        vision &= inputs.mask.astype(bool, copy=False)
    if not vision.any():
        return False
    row, at = (int(i) for i in np.argwhere(vision)[0])
    tolerate(
        f"row {row}: a vision placeholder ({int(ids[row, at])}) at token {at}, but neither image_grid_thw "
        "nor video_grid_thw given",
        "image and video blocks given without any image_grid_thw or video_grid_thw get text positions, as "
        "the model gives them",
    )
    return True


__all__ = ["omni_rope_index", "scan_token_ids"]
