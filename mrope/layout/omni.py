"""The omni engine (Qwen2.5-Omni TMRoPE, Qwen3-Omni): the audio timeline and its token scan.

Rules with audio (``LayoutRules.audio_pad_id`` set) lay a sequence out as the omni models' own
``get_rope_index`` does (transformers 5.24 models/qwen2_5_omni/modeling_qwen2_5_omni.py:217): a 4.x token
scan in which every image, video and audio clip is wrapped in its start / end tokens, each piece starts one
past the largest position of the piece before it, images and videos are 3-D blocks whose time is in
``tokens_per_second`` units, audio is a 1-D run (one position per token), and a video that carries its audio
shares its start with it and interleaves with it by time.

The two omni families differ only in rule values (see :class:`~mrope.LayoutRules`): how mel frames become
audio tokens, whether time is truncated to int64 (Qwen2.5-Omni) or kept as float32 (Qwen3-Omni), how a
video's audio is interleaved (chunks of ``seconds_per_chunk``, or one token at a time) and whether the
double start / end tokens share a position.

Float32. Where positions are fractional the arithmetic follows the model's float32 steps one by one
(a piece's start is the previous piece's largest value plus one, text and wrapper runs add to it), since
a float64 sum rounded once can differ in the last bit. Positions must stay below ``2**24`` there, where
float32 still holds every integer.

Token order and positions. A video's own audio is laid out twice, as the released code does: the
processor orders the placeholders by float64 times (``i * second_per_grid * tokens_per_second``), the
model orders the positions by its float32 times. They agree except at rare float boundaries, and there
the model's positions (in its order) meet the processor's tokens (in its order), which is what
:func:`build_positions` returns too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mrope.audio_grid import audio_tokens, audio_tokens_from_frames, require_audio
from mrope.errors import LayoutError, TokenError
from mrope.grid import TEXT_FILL_ID, merged_grid
from mrope.layout.token_inputs import (
    TokenInputs,
    as_numpy,
    check_type_values,
    grid_rows_array,
    seconds_per_grid,
)
from mrope.positions import Positions, Span
from mrope.rules import LayoutRules
from mrope.segments import Audio, Image, Segment, Text, Video

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
    """A video's time offsets ``(i * spg32) * tps`` in float32, as the omni models compute them from the
    float32 ``second_per_grid`` their processor hands over; truncated to int64 under
    ``time_rounding="trunc"``, float32 under ``"none"``."""
    with np.errstate(over="ignore", invalid="ignore"):
        t32 = (np.arange(n_patches, dtype=np.float32) * np.float32(second_per_grid)) * np.float32(
            rules.tokens_per_second
        )
    if n_patches and not float(t32[-1]) < MAX_FLOAT_POSITION:
        raise LayoutError(
            f"video time offsets overflow: {n_patches - 1} patches x second_per_grid {second_per_grid:g} s x "
            f"{rules.tokens_per_second:g} per second reach {float(t32[-1]):g}, over {MAX_FLOAT_POSITION}"
        )
    return t32 if rules.fractional_time else np.trunc(t32).astype(np.int64)


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
    top = ids.max() if n else dtype(-1)
    if rules.fractional_time and n and not float(top) < MAX_FLOAT_POSITION:
        raise LayoutError(
            f"positions reach {float(top):g}; fractional (float32) positions must stay below {MAX_FLOAT_POSITION}"
        )
    return ids, top, bodies


# ----------------------------------------------------------------------------------------- segments


class OmniPlan:
    """A sequence of segments under audio rules, with the interface of the other engines' plans
    (``num_tokens``, ``notes``, ``image_grids``, ``targets``, ``positions(ids, tokens)``)."""

    def __init__(self, segments: Sequence[Any], rules: LayoutRules) -> None:
        self.rules = rules
        self.notes: list[str] = []
        self.pieces: list[Piece] = []
        self.text_ids: list[Any] = []  # per piece: the text's token ids (or the fill id), else None
        self.image_grids: list[tuple[int, int, int]] = []
        self.video_grids: list[tuple[int, int, int]] = []
        self.second_per_grid: list[float] = []
        self.audio_tokens: list[int] = []
        self.targets: list[tuple[int, int, int]] = []  # the plans' interface (no generation here)
        m = rules.merge_size
        for i, seg in enumerate(segments):
            if isinstance(seg, Text):
                ids = seg.token_ids if seg.token_ids is not None else TEXT_FILL_ID
                if seg.num_tokens:
                    self.pieces.append(Piece("text", seg.num_tokens, index=i))
                    self.text_ids.append(ids)
                continue
            if isinstance(seg, (Image, Video, Audio)) and not seg.wrap:
                raise LayoutError(
                    f"segment {i}: the {rules.name!r} rules find every image, video and audio by its "
                    "start / end tokens, so wrap=False is not supported"
                )
            if isinstance(seg, Image):
                if seg.tiles is not None or getattr(seg, "generate", False):
                    raise LayoutError(
                        f"segment {i}: the {rules.name!r} rules have no tiled or generated images"
                    )
                grid = merged_grid(seg.grid, m, f"image (segment {i})")
                self.image_grids.append(seg.grid)
                self.pieces.append(Piece("image", grid=grid, index=i))
            elif isinstance(seg, Video):
                grid = merged_grid(seg.grid, m, f"video (segment {i})")
                spg = seg.resolved_second_per_grid(rules.temporal_patch_size, rules.fps)
                self.video_grids.append(seg.grid)
                self.second_per_grid.append(spg)
                if seg.audio is None:
                    self.pieces.append(Piece("video", grid=grid, second_per_grid=spg, index=i))
                else:
                    n = audio_tokens(seg.audio, rules)
                    self.audio_tokens.append(n)
                    self.pieces.append(Piece("av", n, grid=grid, second_per_grid=spg, index=i))
            elif isinstance(seg, Audio):
                n = audio_tokens(seg, rules)
                self.audio_tokens.append(n)
                self.pieces.append(Piece("audio", n, index=i))
            else:
                raise LayoutError(
                    f"segment {i} is a {type(seg).__name__}; expected mrope.Text, Image, Video or Audio"
                )
            self.text_ids.append(None)

    @property
    def num_tokens(self) -> int:
        return sum(p.num_tokens for p in self.pieces)

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,  # the other plans take their length; the timeline computes its own
        start: Any = 0,
    ) -> Positions:
        """Fill and describe the sequence, its first piece at ``start`` (0 but in a continued
        conversation)."""
        rules = self.rules
        pos, top, bodies = layout(self.pieces, rules, processor_order=True, start=start)
        total = pos.shape[1]
        if ids is None:
            ids = pos
        else:
            ids[...] = pos
        if tokens is None:
            tokens = np.empty(total, dtype=np.int64)
        spans: list[Span] = []
        at = 0

        def emit(kind: str, n: int, token: Any, index: int, grid: Any = None) -> None:
            nonlocal at
            tokens[at : at + n] = token
            spans.append(Span(kind, at, at + n, index, grid))
            at += n

        av = iter(bodies)
        pad = {"image": rules.image_pad_id, "video": rules.video_pad_id, "audio": rules.audio_pad_id}
        for p, text in zip(self.pieces, self.text_ids, strict=True):
            if p.kind == "text":
                emit("text", p.n, text, p.index)
                continue
            if p.kind == "audio":
                emit("wrapper", 1, rules.audio_start_id, p.index)
                emit("audio", p.n, rules.audio_pad_id, p.index)
                emit("wrapper", 1, rules.audio_end_id, p.index)
                continue
            emit("wrapper", 1, rules.vision_start_id, p.index)
            if p.kind != "av":
                emit(p.kind, p.vision_tokens, pad[p.kind], p.index, p.grid)
                emit("wrapper", 1, rules.vision_end_id, p.index)
                continue
            assert p.grid is not None
            emit("wrapper", 1, rules.audio_start_id, p.index)
            frame = p.grid[1] * p.grid[2]
            for kind, a, b in next(av):
                whole = kind == "video" and a % frame == 0 and b % frame == 0
                grid = ((b - a) // frame, p.grid[1], p.grid[2]) if whole else None
                emit(kind, b - a, pad[kind], p.index, grid)
            emit("wrapper", 1, rules.audio_end_id, p.index)
            emit("wrapper", 1, rules.vision_end_id, p.index)
        assert at == total
        n = ids.dtype.type(total)
        delta = ids.dtype.type(top + ids.dtype.type(1)) - n if total else ids.dtype.type(0)
        return Positions(
            ids=ids,
            delta=delta.item(),
            spans=tuple(spans),
            input_ids=tokens,
            image_grid_thw=np.asarray(self.image_grids, dtype=np.int64).reshape(-1, 3),
            video_grid_thw=np.asarray(self.video_grids, dtype=np.int64).reshape(-1, 3),
            second_per_grid_ts=np.asarray(self.second_per_grid, dtype=np.float64),
            rules=rules,
            notes=tuple(self.notes),
            audio_tokens=np.asarray(self.audio_tokens, dtype=np.int64),
        )


def plan_segments(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> OmniPlan:
    """The plan of one sequence of segments (the omni timeline takes no tokenizer)."""
    return OmniPlan(segments, rules)


def next_start(positions: Positions) -> int | float:
    """Where a piece appended to a whole sequence starts: one past its last token (a text token or an
    end marker: ``llm_pos_ids_list[-1].max() + 1``), in the positions' dtype."""
    if not positions.num_tokens:
        return 0
    last = positions.ids[0, -1]
    return (last + last.dtype.type(1)).item()


def continue_segments(
    segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any, start: int | float, image_index: int = 0
) -> Positions:
    """Positions of ``segments`` appended to a sequence after which the next piece starts at ``start``
    (fractional under fractional time); spans count from the first new token."""
    return plan_segments(segments, rules, tokenizer).positions(start=start)


def count_tokens(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> int:
    """Tokens of a sequence under audio rules, arithmetically."""
    return OmniPlan(segments, rules).num_tokens


# -------------------------------------------------------------------------------------- token ids


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
        if self.next != len(self.values):
            raise TokenError(f"{len(self.values)} {self.name} given but the sequences use {self.next}")


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
            expect(p + 1 + count, ve, "vision_end")
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
    # placeholders outside their blocks: the model would misplace them
    at = 0
    for pc in pieces:
        if pc.kind == "text":
            chunk = row_ids[at : at + pc.n]
            for what, token in (("image", i_pad), ("video", v_pad), ("audio", a_pad)):
                hits = np.flatnonzero(chunk == token)
                if hits.size:
                    raise TokenError(
                        f"row {row}: {what} placeholder ({token}) at valid token {at + int(hits[0])} "
                        "outside a start / end block"
                    )
        at += pc.num_tokens
    return pieces


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
) -> tuple[np.ndarray, np.ndarray]:
    """The omni models' ``get_rope_index`` on token ids (validated ``[B, L]`` ids, bool mask or None).

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
    out = np.full((3, b, length), pad_position, dtype=dtype)
    deltas = np.zeros(b, dtype=dtype)
    for row in range(b):
        valid = np.arange(length) if mask is None else np.flatnonzero(mask[row])
        row_ids = ids[row, valid]
        pieces = _row_pieces(row_ids, row, rules, images, videos, audios, use_audio_in_video)
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


def scan_token_ids(inputs: TokenInputs) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None]]:
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
    )
    return out, deltas, [None] * inputs.ids.shape[0]


__all__ = [
    "MAX_FLOAT_POSITION",
    "OmniPlan",
    "continue_segments",
    "count_tokens",
    "interleave",
    "layout",
    "next_start",
    "omni_rope_index",
    "plan_segments",
    "scan_token_ids",
    "video_time",
]
