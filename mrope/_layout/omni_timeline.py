"""The omni timeline: a sequence of omni pieces (text, image, video, audio, video with its audio) -> positions.

It follows the released omni ``get_rope_index`` step by step: every image, video and audio clip is
wrapped in its start / end tokens, each piece starts one past the largest position of the piece before
it, and a video that carries its audio interleaves with it by time (:func:`interleave`). The segment
plan (:mod:`mrope._layout.omni`) and the token scan (:mod:`mrope._layout.omni_scan`) both lay their pieces
out here.

Float32. Where positions are fractional the arithmetic follows the model's float32 steps one by one
(a piece's start is the previous piece's largest value plus one, text and wrapper runs add to it), since
a float64 sum rounded once can differ in the last bit. Positions must stay below ``2**24`` there, where
float32 still holds every integer.

Token order and positions. A video's own audio is laid out twice, as the released code does: the
processor orders the placeholders by float64 times (``i * second_per_grid * tokens_per_second``), the
model orders the positions by its float32 times. They agree except at rare float boundaries, and there
the model's positions (in its order) meet the processor's tokens (in its order), which is what
:func:`build_positions` returns too.

Under ``positions_base="index"`` the pieces are laid out as above (their tokens, and a video's token
order) and every token then takes its index in the sequence on every axis, counted from the start:
Qwen3-ASR's ``get_rope_index`` (qwen-asr 0.0.6 ``qwen_asr/core/transformers_backend/modeling_qwen3_asr.py``
:442-444, ``cumsum(attention_mask) - 1`` on three axes), which reads no token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mrope._errors import LayoutError
from mrope._grid import seconds_product
from mrope._rules import LayoutRules

MAX_FLOAT_POSITION = 2**24
"""Fractional (float32) positions must stay below this: float32 holds every integer only up to it."""


# ------------------------------------------------------------------------------------------ pieces


@dataclass(frozen=True)
class Piece:
    """One part of an omni sequence.

    ``kind`` is ``"text"`` (``n`` tokens), ``"image"`` / ``"video"`` (LLM ``grid`` ``(T', H', W')``,
    video ``second_per_grid``), ``"audio"`` (``n`` tokens) or ``"av"`` (a video ``grid`` with its own
    audio of ``n`` tokens). ``index`` is the segment it came from (-1 from token ids).
    """

    kind: str
    n: int = 0
    grid: tuple[int, int, int] | None = None
    second_per_grid: float = 1.0
    index: int = -1

    @property
    def vision_tokens(self) -> int:
        assert self.grid is not None
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def num_tokens(self) -> int:
        """Tokens of the piece, wrappers included."""
        if self.kind == "text":
            return self.n
        if self.kind == "audio":
            return self.n + 2
        if self.kind == "av":
            return self.vision_tokens + self.n + 4
        return self.vision_tokens + 2


def video_time(n_patches: int, second_per_grid: float, rules: LayoutRules) -> np.ndarray:
    """A video's time offsets :func:`mrope._grid.seconds_product` (released: ``(i * spg32) * tps`` in
    float32, as the omni models compute them from the float32 ``second_per_grid`` their processor hands
    over; ``seconds_grouping="i*(spg*tps) f64"``: vLLM's float64 product); truncated to int64 under
    ``time_rounding="trunc"``, float32 under ``"none"``."""
    t = seconds_product(n_patches, rules, second_per_grid)
    if n_patches and not float(t[-1]) < MAX_FLOAT_POSITION:
        raise LayoutError(
            f"video time offsets overflow: {n_patches - 1} patches x second_per_grid {second_per_grid:g} s x "
            f"{rules.tokens_per_second:g} per second reach {float(t[-1]):g}, over {MAX_FLOAT_POSITION}"
        )
    return t.astype(np.float32) if rules.fractional_time else np.trunc(t).astype(np.int64)


def _image_time(n_patches: int, rules: LayoutRules) -> np.ndarray:
    t = np.arange(n_patches, dtype=np.float64) * float(rules.tokens_per_second)
    return t.astype(np.float32) if rules.fractional_time else np.trunc(t).astype(np.int64)


def _chunk_bounds(values: np.ndarray, per_chunk: int) -> list[tuple[int, int]]:
    """The omni processors' and models' ``get_chunked_index``: split a non-decreasing value list at
    ``per_chunk``, ``2 * per_chunk``, ...; a threshold is passed at most once per token, so a value that
    jumps over several thresholds opens several one-token chunks, as the released loop does."""
    n = len(values)
    bounds: list[tuple[int, int]] = []
    start, chunk = 0, 1
    if n:
        change = (np.flatnonzero(values[1:] != values[:-1]) + 1).tolist()
        for a, b in zip([0, *change], [*change, n], strict=True):
            v = values[a]
            i = a
            while i < b and v >= chunk * per_chunk:
                bounds.append((start, i))
                start, chunk, i = i, chunk + 1, i + 1
    bounds.append((start, n))
    return bounds


Run = tuple[str, int, int]
"""``("video" | "audio", start, stop)``: a run of one stream's tokens in output order."""


def interleave(
    video_values: np.ndarray, audio_values: np.ndarray, rules: LayoutRules
) -> tuple[list[Run], Run]:
    """The output order of a video's tokens (time ``video_values``, one per token) and its audio's
    (``audio_values``), and the last piece the released loop appends (whose largest position starts
    the end tokens).

    ``"chunks"``: chunk ``j`` of the video, then chunk ``j`` of the audio, chunks of
    ``int(tokens_per_second * seconds_per_chunk)`` time units. ``"interleave"``: one token at a time,
    the earlier first and video first on ties, then the rest of whichever stream is left.
    """
    nv, na = len(video_values), len(audio_values)
    if rules.audio_in_video == "chunks":
        per = int(rules.tokens_per_second * rules.seconds_per_chunk)
        if per < 1:
            raise LayoutError(
                f"tokens_per_second x seconds_per_chunk = {rules.tokens_per_second * rules.seconds_per_chunk:g}: "
                "a chunk needs at least one time unit"
            )
        vc, ac = _chunk_bounds(video_values, per), _chunk_bounds(audio_values, per)
        runs: list[Run] = []
        last: Run = ("video", 0, 0)
        for j in range(max(len(vc), len(ac))):
            if j < len(vc):
                last = ("video", *vc[j])
                runs.append(last)
            if j < len(ac):
                last = ("audio", *ac[j])
                runs.append(last)
        return [r for r in runs if r[2] > r[1]], last
    if na == 0:
        return [("video", 0, nv)], ("video", 0, nv)
    if nv == 0:
        return [("audio", 0, na)], ("audio", 0, na)
    # video token v goes after every audio token earlier than it (ties: video first)
    audio_before = np.searchsorted(audio_values, video_values, side="left")
    is_video = np.zeros(nv + na, dtype=bool)
    is_video[np.arange(nv) + audio_before] = True
    change = (np.flatnonzero(is_video[1:] != is_video[:-1]) + 1).tolist()
    runs, v, a = [], 0, 0
    for s, e in zip([0, *change], [*change, nv + na], strict=True):
        if is_video[s]:
            runs.append(("video", v, v + e - s))
            v += e - s
        else:
            runs.append(("audio", a, a + e - s))
            a += e - s
    if is_video[-1]:  # audio ran out first: the rest of the video is one piece
        tail_start = int(np.count_nonzero(audio_before < na))
        return runs, ("video", tail_start, nv)
    return runs, ("audio", na - 1, na)


# ------------------------------------------------------------------------------------------ layout


class _Cursor:
    """The released loop's running start (``st_idx``) and its list of appended position pieces."""

    def __init__(self, rules: LayoutRules, n: int, first: Any = 0) -> None:
        self.dtype = np.float32 if rules.fractional_time else np.int64
        self.out = np.empty((3, n), dtype=self.dtype)
        self.at = 0
        self.first = self.dtype(first)  # the start before anything (0, or where a conversation stands)
        self.last_max: Any = None  # the largest value of the last appended piece

    def start(self) -> Any:
        """``llm_pos_ids_list[-1].max() + 1`` (``first`` before anything)."""
        return self.first if self.last_max is None else self.dtype(self.last_max + self.dtype(1))

    def put(self, block: np.ndarray, last_max: Any = None) -> None:
        n = block.shape[1]
        self.out[:, self.at : self.at + n] = block
        self.at += n
        if n:
            self.last_max = block.max() if last_max is None else last_max

    def run(self, n: int, st: Any) -> np.ndarray:
        """``arange(n) + st`` on every axis."""
        return np.broadcast_to(np.arange(n, dtype=self.dtype) + st, (3, n))


def _vision_block(grid: tuple[int, int, int], tau: np.ndarray, st: Any, dtype: Any) -> np.ndarray:
    t, hh, ww = grid
    block = np.empty((3, t, hh, ww), dtype=dtype)
    block[0] = (tau.astype(dtype) + st)[:, None, None]
    block[1] = (np.arange(hh, dtype=dtype) + st)[None, :, None]
    block[2] = (np.arange(ww, dtype=dtype) + st)[None, None, :]
    return block.reshape(3, -1)


def layout(
    pieces: Sequence[Piece], rules: LayoutRules, processor_order: bool = False, start: Any = 0
) -> tuple[np.ndarray, Any, list[list[Run]]]:
    """Positions of one sequence of pieces, following the released omni ``get_rope_index`` step by step;
    the first piece starts at ``start`` (0, or where a conversation the pieces continue stands).

    Returns:
        ``(ids [3, n], top, bodies)``: positions (int64, or float32 under ``time_rounding="none"``), the
        largest position, and for each ``"av"`` piece the runs of its body in the processor's token
        order (``processor_order=True``) or the model's.
    """
    n = sum(p.num_tokens for p in pieces)
    cur = _Cursor(rules, n, start)
    dtype = cur.dtype
    one = dtype(1)
    bodies: list[list[Run]] = []
    text = 0
    shared = rules.audio_in_video_wrappers == "shared"
    for p in pieces:
        if p.kind == "text":
            text += p.n
            continue
        st = cur.start()
        if text:
            cur.put(cur.run(text, st), dtype(st + dtype(text - 1)))
            st = dtype(st + dtype(text))
            text = 0
        double = p.kind == "av"
        if double and shared:  # both start tokens at one position
            cur.put(cur.run(1, st), st)
            cur.put(cur.run(1, st), st)
            st = dtype(st + one)
        else:
            k = 2 if double else 1
            cur.put(cur.run(k, st), dtype(st + dtype(k - 1)))
            st = dtype(st + dtype(k))
        if p.kind == "audio":
            cur.put(cur.run(p.n, st), dtype(st + dtype(p.n - 1)))
        elif p.kind == "image":
            assert p.grid is not None
            cur.put(_vision_block(p.grid, _image_time(p.grid[0], rules), st, dtype))
        elif p.kind == "video":
            assert p.grid is not None
            cur.put(_vision_block(p.grid, video_time(p.grid[0], p.second_per_grid, rules), st, dtype))
        else:  # a video with its own audio
            assert p.grid is not None
            tau = video_time(p.grid[0], p.second_per_grid, rules)
            video = _vision_block(p.grid, tau, st, dtype)
            audio = cur.run(p.n, st)
            if rules.audio_in_video == "chunks":  # chunked on time relative to the shared start
                model_runs, last = interleave(
                    np.repeat(tau, p.grid[1] * p.grid[2]), np.arange(p.n, dtype=tau.dtype), rules
                )
            else:  # merged on the positions themselves
                model_runs, last = interleave(video[0], audio[0], rules)
            streams = {"video": video, "audio": audio}
            for kind, a, b in model_runs:
                cur.put(streams[kind][:, a:b])
            kind, a, b = last
            cur.last_max = streams[kind][:, a:b].max()
            if processor_order:
                per_token = np.repeat(
                    np.arange(p.grid[0], dtype=np.float64)
                    * float(p.second_per_grid)
                    * float(rules.tokens_per_second),
                    p.grid[1] * p.grid[2],
                )
                bodies.append(interleave(per_token, np.arange(p.n, dtype=np.float64), rules)[0])
            else:
                bodies.append(model_runs)
        st = cur.start()
        if double and shared:
            cur.put(cur.run(1, st), st)
            cur.put(cur.run(1, st), st)
        else:
            k = 2 if double else 1
            cur.put(cur.run(k, st), dtype(st + dtype(k - 1)))
    if text:
        st = cur.start()
        cur.put(cur.run(text, st), dtype(st + dtype(text - 1)))
    assert cur.at == n
    ids = cur.out
    if rules.positions_base == "index":  # every token at its sequence index (module docstring)
        ids[...] = np.arange(n, dtype=dtype) + cur.first
    top = ids.max() if n else dtype(-1)
    if rules.fractional_time and n and not float(top) < MAX_FLOAT_POSITION:
        raise LayoutError(
            f"positions reach {float(top):g}; fractional (float32) positions must stay below {MAX_FLOAT_POSITION}"
        )
    return ids, top, bodies


__all__ = ["MAX_FLOAT_POSITION", "Piece", "Run", "interleave", "layout", "video_time"]
