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
from mrope._layout.pieces import OWN_ADVANCES, Block, TextRun
from mrope._program import PositionProgram
from mrope._program_build import LINE_LIMIT, Runs

_AXES = 3
"""The counter engine's axes (t, h, w)."""
_LINE = ((0, 0, 1),) * _AXES
_POINT = ((0, 0, 0),) * _AXES
"""The strides of a text line and of one token: shared (a run's numbers are never changed in place, and
tuples of numbers are no work for the garbage collector, which a long video's thousands of runs would
otherwise wake)."""


def walk_pieces(pieces: Sequence[TextRun | Block], advance: str, start: int = 0) -> tuple[Runs, int] | None:
    """The runs of ``pieces`` laid out from counter ``start`` (as :func:`fill_pieces` takes it) and the
    largest position (``start - 1`` when empty); ``None`` where the plan form does not apply (see the
    module docstring). Python arithmetic on each piece's few numbers: no numpy call per piece."""
    if advance in OWN_ADVANCES:  # the schemes' advance rules: the program is compiled from the ids
        return None
    runs = Runs(_AXES, False)
    stretch: list[list[int]] = []  # pending text: [first position, tokens] per contiguous part
    s, top = start, start - 1
    spatial = advance == "spatial"
    for p in pieces:
        if type(p) is TextRun:
            n = p.n
            if s + n > MAX_POSITION:
                return None
            _add(stretch, s, n)
            s += n
            if s - 1 > top:
                top = s - 1
            continue
        if p.step is not None or p.gather is not None:  # a line (V2PE), thumbnail positions (RoPE-DHR)
            return None
        tau = p.tau.tolist()
        if len(tau) > 2 and any(t != tau[0] + k * (tau[1] - tau[0]) for k, t in enumerate(tau)):
            return None
        h0s, w0s = p.tile_h0.tolist(), p.tile_w0.tolist()
        top_t = max(tau)
        top_hw = max(p.h0 + max(h0s) + p.tile_h - 1, p.w0 + max(w0s) + p.tile_w - 1)
        if p.follow_t:
            top_hw += top_t
        if p.wrap is not None:  # start wrapper at s, the block from s + 1, the end wrapper where text resumes
            end = 1 + (max(p.span_h, p.span_w) if spatial else max(top_t, top_hw) + 1)
            high = s + max(end, 1 + top_t, 1 + top_hw)
            if high > MAX_POSITION:
                return None
            _add(stretch, s, 1)
            text_lines(stretch, runs)
            _tiles(p, tau, h0s, w0s, s + 1, s + 1, runs)
            stretch = [[s + end, 1]]
            top = max(top, high)
            s += end + 1
            continue
        hw = s if p.anchored else 0
        high = max(s + top_t, hw + top_hw)
        if high > MAX_POSITION:
            return None
        text_lines(stretch, runs)
        stretch = []
        _tiles(p, tau, h0s, w0s, s, hw, runs)
        top = max(top, high)
        s = s + max(p.span_h, p.span_w) if spatial else top + 1
    text_lines(stretch, runs)
    return runs, top


def _add(stretch: list[list[int]], first: int, n: int) -> None:
    """Append ``n`` text tokens from position ``first`` to ``stretch`` (joined to a part they continue)."""
    if stretch and stretch[-1][0] + stretch[-1][1] == first:
        stretch[-1][1] += n
    elif n:
        stretch.append([first, n])


def plan_program(
    pieces: Sequence[TextRun | Block], advance: str, start: int, delta: int, digest: str
) -> PositionProgram | None:
    """The :class:`PositionProgram` of ``pieces`` laid out from ``start`` (its ``delta`` and rules
    ``digest`` given), or ``None`` where the plan form does not apply."""
    walked = walk_pieces(pieces, advance, start)
    if walked is None:
        return None
    return walked[0].program(sum(p.n for p in pieces), delta, digest)


def _tiles(p: Block, tau: list[int], h0s: list[int], w0s: list[int], t0: int, hw0: int, runs: Runs) -> None:
    """Each tile of block ``p`` (time offsets ``tau``, tile offsets ``h0s`` / ``w0s``) as one affine run
    of its grid ``(T', tile_h, tile_w)``: time from ``t0``, h and w from ``hw0`` (the offsets
    :func:`mrope._layout.pieces.add_template` adds)."""
    frames, th, tw = p.tile_grid
    if not frames * th * tw:
        return
    first = tau[0]
    step = tau[1] - first if frames > 1 else 0
    lift = first if p.follow_t else 0
    frame_step = step if p.follow_t else 0
    strides = ((step, 0, 0), (frame_step, 1 if th > 1 else 0, 0), (frame_step, 0, 1 if tw > 1 else 0))
    for h0, w0 in zip(h0s, w0s, strict=True):
        runs.affine((frames, th, tw), (t0 + first, hw0 + p.h0 + h0 + lift, hw0 + p.w0 + w0 + lift), strides)


def text_lines(stretch: Sequence[Sequence[int]], runs: Runs) -> None:
    """A stretch of text tokens (``(first position, tokens)`` parts, each ``s, s+1, ...`` on every axis)
    as the arithmetic lines :func:`mrope._program_build.compile_program` cuts it into: from each token,
    the longest line whose steps all equal its first step; stored when that takes too many lines."""
    if not stretch:
        return
    if len(stretch) == 1:  # one contiguous part: one line (or one token)
        first, n = stretch[0]
        runs.affine((1, 1, n), (first,) * _AXES, _LINE if n > 1 else _POINT)
        return
    n = sum(c for _, c in stretch)
    firsts = [0]
    for _, c in stretch[:-1]:
        firsts.append(firsts[-1] + c)

    def position(token: int) -> int:
        k = bisect_right(firsts, token) - 1
        return stretch[k][0] + token - firsts[k]

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
        runs.affine((1, 1, line), (position(at),) * _AXES, ((0, 0, step),) * _AXES)
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
