"""A counter plan's position program made straight from its pieces, in O(pieces), with no ids written.

:func:`plan_program` walks the pieces as :func:`mrope._layout.pieces.fill_pieces` fills them (the same
counter: a text run at ``s .. s+n-1`` on every axis, a block at ``s`` plus its template, the next piece
at ``1 + max`` or the spatial advance) and hands each run to the same run collector
(:class:`mrope._program_build.Runs`) in the same order as :func:`mrope._program_build.compile_program`
does when it reads them off the filled ids: a block's tile as one affine block of its grid, each stretch
of text, wrapper and timestamp tokens between blocks cut into the same arithmetic lines (greedily longest
first, stored when it would take more than one line per ``LINE_LIMIT`` tokens). The program's bytes are
therefore those the compile path gives.

Where this form does not apply it returns ``None`` and the caller compiles from the ids instead: a block
whose frames' time offsets are not evenly spaced (Qwen2.5-VL's absolute time at some frame rates; the
compile path then checks each block and cuts it into lines), a sequence that would overflow (the fill
raises the error), and rules with other than three axes. Pruned prompts (``keep=`` masks), the sequence,
canvas and omni engines never reach it: their positions carry no counter plan.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from mrope._grid import MAX_POSITION
from mrope._layout.pieces import Block, TextRun
from mrope._program import PositionProgram
from mrope._program_build import LINE_LIMIT, Runs

_AXES = 3
"""The counter engine's axes (t, h, w)."""


def walk_pieces(pieces: Sequence[TextRun | Block], advance: str, start: int = 0) -> tuple[Runs, int] | None:
    """The runs of ``pieces`` laid out from counter ``start`` (as :func:`fill_pieces` takes it) and the
    largest position (``start - 1`` when empty); ``None`` where the plan form does not apply (see the
    module docstring)."""
    runs = Runs(_AXES, False)
    stretch: list[tuple[int, int]] = []  # pending text: (first position, tokens) per contiguous part
    s, top = start, start - 1
    spatial = advance == "spatial"
    for p in pieces:
        if type(p) is TextRun:
            if s + p.n > MAX_POSITION:
                return None
            if p.n:
                stretch.append((s, p.n))
            s += p.n
            top = max(top, s - 1)
            continue
        tau = p.tau
        if len(tau) > 2 and not (np.diff(tau) == tau[1] - tau[0]).all():
            return None
        top_t = int(tau.max())
        top_hw = max(p.h0 + int(p.tile_h0.max()) + p.tile_h - 1, p.w0 + int(p.tile_w0.max()) + p.tile_w - 1)
        if p.follow_t:
            top_hw += top_t
        if p.wrap is not None:  # start wrapper at s, the block from s + 1, the end wrapper where text resumes
            end = 1 + (max(p.span_h, p.span_w) if spatial else max(top_t, top_hw) + 1)
            high = s + max(end, 1 + top_t, 1 + top_hw)
            if high > MAX_POSITION:
                return None
            stretch.append((s, 1))
            text_lines(stretch, runs)
            _tiles(p, s + 1, s + 1, runs)
            stretch = [(s + end, 1)]
            top = max(top, high)
            s += end + 1
            continue
        hw = s if p.anchored else 0
        high = max(s + top_t, hw + top_hw)
        if high > MAX_POSITION:
            return None
        text_lines(stretch, runs)
        stretch = []
        _tiles(p, s, hw, runs)
        top = max(top, high)
        s = s + max(p.span_h, p.span_w) if spatial else top + 1
    text_lines(stretch, runs)
    return runs, top


def plan_program(
    pieces: Sequence[TextRun | Block], advance: str, start: int, delta: int, digest: str
) -> PositionProgram | None:
    """The :class:`PositionProgram` of ``pieces`` laid out from ``start`` (its ``delta`` and rules
    ``digest`` given), or ``None`` where the plan form does not apply."""
    walked = walk_pieces(pieces, advance, start)
    if walked is None:
        return None
    runs, _ = walked
    return runs.program(sum(p.n for p in pieces), delta, digest, np.dtype(np.int64))


def _tiles(p: Block, t0: int, hw0: int, runs: Runs) -> None:
    """Each tile of block ``p`` as one affine run of its grid ``(T', tile_h, tile_w)``: time from ``t0``,
    h and w from ``hw0`` (the offsets :func:`mrope._layout.pieces.add_template` adds)."""
    frames, th, tw = p.tile_grid
    if not frames * th * tw:
        return
    first = int(p.tau[0])
    step = int(p.tau[1] - p.tau[0]) if frames > 1 else 0
    lift = first if p.follow_t else 0
    strides = np.zeros((_AXES, 3), dtype=np.int64)
    if frames > 1:
        strides[0, 0] = step
        if p.follow_t:
            strides[1:, 0] = step
    if th > 1:
        strides[1, 1] = 1
    if tw > 1:
        strides[2, 2] = 1
    for h0, w0 in zip(p.tile_h0.tolist(), p.tile_w0.tolist(), strict=True):
        origin = np.array((t0 + first, hw0 + p.h0 + h0 + lift, hw0 + p.w0 + w0 + lift), dtype=np.int64)
        runs.affine((frames, th, tw), origin, strides)


def text_lines(stretch: list[tuple[int, int]], runs: Runs) -> None:
    """A stretch of text tokens (``(first position, tokens)`` parts, each ``s, s+1, ...`` on every axis)
    as the arithmetic lines :func:`mrope._program_build.compile_program` cuts it into: from each token,
    the longest line whose steps all equal its first step; stored when that takes too many lines."""
    n = sum(c for _, c in stretch)
    if not n:
        return
    firsts = [0]
    for _, c in stretch[:-1]:
        firsts.append(firsts[-1] + c)

    def position(token: int) -> int:
        k = bisect_right(firsts, token) - 1
        return stretch[k][0] + token - firsts[k]

    if n == 1:
        runs.affine((1, 1, 1), np.full(_AXES, stretch[0][0], dtype=np.int64), np.zeros((_AXES, 3), np.int64))
        return
    steps: list[list[int]] = []  # the steps between neighbouring tokens, run-length coded: [step, count]
    last = None
    for first, c in stretch:
        if last is not None:
            _push(steps, first - last, 1)
        _push(steps, 1, c - 1)
        last = first + c - 1
    if len(steps) - 1 > n // LINE_LIMIT + 2:
        ids = np.concatenate([np.arange(first, first + c, dtype=np.int64) for first, c in stretch])
        runs.stored(np.broadcast_to(ids, (_AXES, n)).copy())
        return
    at = entry = entry_start = 0
    while at < n:
        if at == n - 1:
            line, step = 1, 0
        else:
            while entry_start + steps[entry][1] <= at:
                entry_start += steps[entry][1]
                entry += 1
            line, step = entry_start + steps[entry][1] + 1 - at, steps[entry][0]
        strides = np.zeros((_AXES, 3), dtype=np.int64)
        strides[:, 2] = step
        runs.affine((1, 1, line), np.full(_AXES, position(at), dtype=np.int64), strides)
        at += line


def _push(steps: list[list[int]], step: int, count: int) -> None:
    """Append ``count`` steps of ``step`` to the run-length coded ``steps``."""
    if count <= 0:
        return
    if steps and steps[-1][0] == step:
        steps[-1][1] += count
    else:
        steps.append([step, count])


__all__ = ["plan_program", "text_lines", "walk_pieces"]
