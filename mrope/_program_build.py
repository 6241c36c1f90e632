"""Compile a sequence's positions into a :class:`~mrope._program.PositionProgram` (runs, checked exact).

The segments the layout engines report (:class:`mrope.Span`) say where each piece lies: a vision span
with a grid is tried as one affine block (its grid, or per frame / tile the grid's last two sides); any
other stretch of tokens is cut into arithmetic lines (text, wrappers, timestamps, rows left by a newline
column). The program is expanded and compared with the positions it stands for; a stretch that does
not compress (a pruned, irregular set, or float rounding an affine run would not reproduce) is stored
explicitly. Adjacent text lines that continue each other are joined, so a text, wrapper, text sequence
is one run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np

from mrope._program import PositionProgram, block_values

LINE_LIMIT = 8
"""A stretch cut into more lines than one per this many tokens is stored explicitly instead."""


class Runs:
    """Runs collected in token order, as Python lists (a program has few runs, and list arithmetic on a
    run's few numbers costs less than numpy's per call)."""

    def __init__(self, axes: int, is_float: bool) -> None:
        self.axes, self.is_float = axes, is_float
        self.num = np.float64 if is_float else np.int64
        self.lengths: list[int] = []
        self.shape: list[tuple[int, int, int]] = []
        self.origin: list[Sequence] = []
        self.strides: list[Sequence[Sequence]] = []
        self.explicit: list[int] = []
        self.pool: list[np.ndarray] = []
        self.pool_size = 0

    def affine(self, dims: tuple[int, int, int], origin: Sequence, strides: Sequence[Sequence]) -> None:
        """Append a block of shape ``dims``: ``origin`` ``[A]`` and ``strides`` ``[A][3]`` as tuples or lists
        of numbers, never changed in place (a line that continues the last one is joined to it)."""
        n = dims[0] * dims[1] * dims[2]
        if dims[0] == dims[1] == 1 and not self.is_float and self._joins(origin, [s[2] for s in strides], n):
            return
        self.lengths.append(n)
        self.shape.append(dims)
        self.origin.append(origin)
        self.strides.append(strides)
        self.explicit.append(-1)

    def _joins(self, origin: list, step: list, n: int) -> bool:
        """Extend the last run by this line when it is a line that this one continues."""
        if not self.lengths or self.explicit[-1] >= 0 or self.shape[-1][:2] != (1, 1):
            return False
        last_n, last_origin, last_strides = self.lengths[-1], self.origin[-1], self.strides[-1]
        last_step = [s[2] for s in last_strides]
        if last_n == 1:  # a single token takes the step of the line it starts
            if n > 1 and [o + s for o, s in zip(last_origin, step, strict=True)] != list(origin):
                return False
            new = [o - lo for o, lo in zip(origin, last_origin, strict=True)] if n == 1 else step
            self.strides[-1] = [[s[0], s[1], x] for s, x in zip(last_strides, new, strict=True)]
        elif [o + s * last_n for o, s in zip(last_origin, last_step, strict=True)] != list(origin) or (
            n > 1 and step != last_step
        ):
            return False
        self.lengths[-1] = last_n + n
        self.shape[-1] = (1, 1, last_n + n)
        return True

    def stored(self, ids: np.ndarray) -> None:
        n = ids.shape[1]
        self.lengths.append(n)
        self.shape.append((1, 1, n))
        self.origin.append([0] * self.axes)
        self.strides.append([[0, 0, 0]] * self.axes)
        self.explicit.append(self.pool_size)
        self.pool.append(ids)
        self.pool_size += n

    def program(
        self, num_tokens: int, delta: Any, digest: str, dtype: np.dtype | None = None
    ) -> PositionProgram:
        """The program of these runs (``dtype``: the positions', by default int64, float32 when float),
        integer runs folded into groups (:func:`fold_groups`; float programs stay plain, their rounding
        that of one block's sum)."""
        if dtype is None:
            dtype = np.dtype(np.float32 if self.is_float else np.int64)
        r, a = len(self.lengths), self.axes
        columns = (self.lengths, self.shape, self.origin, self.strides, self.explicit)
        folded = None if self.is_float else fold_groups(*columns)
        if folded is None:
            lead: Sequence[int] = [0] * r
            advance: Iterable[Any] = [0] * (r * a)
        else:
            r = len(folded[0])
            columns, lead, advance = folded[:5], folded[5], chain.from_iterable(folded[6])
        lengths, shape, origin, strides, explicit = columns
        # the counts and the numbers as flat lists made into one array (two when the numbers are float),
        # the run arrays contiguous views of it
        counts = [*lengths, *chain.from_iterable(shape), *explicit, *lead]
        numbers = [*chain.from_iterable(origin), *chain.from_iterable(chain.from_iterable(strides)), *advance]
        if self.is_float:
            ints, nums = np.array(counts, dtype=np.int64), np.array(numbers, dtype=self.num)
        else:
            flat = np.array(counts + numbers, dtype=np.int64)
            ints, nums = flat[: 6 * r], flat[6 * r :]
        return PositionProgram(
            num_tokens=num_tokens,
            delta=delta,
            rules_digest=digest,
            lengths=ints[:r],
            shape=ints[r : 4 * r].reshape(r, 3),
            origin=nums[: r * a].reshape(r, a),
            strides=nums[r * a : 4 * r * a].reshape(r, a, 3),
            explicit=ints[4 * r : 5 * r],
            pool=np.concatenate(self.pool, axis=1) if self.pool else np.zeros((a, 0), dtype=dtype),
            lead=ints[5 * r :],
            advance=nums[4 * r * a :].reshape(r, a),
        )


def fold_groups(
    lengths: Sequence[int],
    shape: Sequence[tuple[int, int, int]],
    origin: Sequence[Sequence],
    strides: Sequence[Sequence[Sequence]],
    explicit: Sequence[int],
) -> tuple[list, ...] | None:
    """Plain integer runs (columns of :class:`Runs`) with repeated groups folded, greedily from the first
    run: a text line of ``n`` tokens (every axis stepping 1) followed by a block starting where the line
    would go on, repeated at a constant advance with the same ``n``, block shape and strides (a
    timestamped video's frames), is one run of ``lead`` ``n``; failing that, affine runs of one shape and
    strides repeated at a constant advance (rows of tiles, lines with equal gaps) are one run of ``lead``
    0. Two groups or more fold; anything else stays as it was (``lead`` 0, ``advance`` 0).

    Returns the columns ``lengths``, ``shape``, ``origin``, ``strides``, ``explicit``, ``lead``,
    ``advance``, or ``None`` when nothing folds (no run has the shape of the run one or two after it:
    the common case, answered by a set of the shapes when they are all distinct). O(runs) Python steps."""
    count = len(shape)
    if len(set(shape)) == count or not (
        any(a == b for a, b in zip(shape, shape[1:], strict=False))
        or any(a == b for a, b in zip(shape, shape[2:], strict=False))
    ):
        return None
    start = [tuple(o) for o in origin]
    step = [tuple(tuple(x) for x in s) for s in strides]
    zero = (0,) * len(start[0])
    out: tuple[list, ...] = ([], [], [], [], [], [], [])
    i = 0
    while i < count:
        run = (lengths[i], shape[i], start[i], step[i], explicit[i], 0, zero)
        width = 1
        if explicit[i] < 0:
            for width in (2, 1):
                groups, advance = _repeats(i, width, shape, start, step, explicit)
                if groups > 1:
                    lead = lengths[i] if width == 2 else 0
                    b = i + width - 1
                    run = (groups * (lead + lengths[b]), shape[b], start[i], step[b], -1, lead, advance)
                    width *= groups
                    break
            else:
                width = 1
        for column, value in zip(out, run, strict=True):
            column.append(value)
        i += width
    return out


_TEXT_STEP = (0, 0, 1)


def _repeats(
    i: int, width: int, dims: Sequence[tuple], start: list[tuple], step: list[tuple], explicit: Sequence[int]
) -> tuple[int, tuple]:
    """How many groups of ``width`` runs repeat from run ``i`` (a text line and its block for width 2,
    one affine run for width 1), and their advance."""
    count = len(dims)
    if i + 2 * width > count or dims[i + width] != dims[i] or dims[i + 2 * width - 1] != dims[i + width - 1]:
        return 1, ()
    if width == 2:
        n = dims[i][2]
        line = dims[i][:2] == (1, 1) and (n == 1 or all(s == _TEXT_STEP for s in step[i]))
        if not line or explicit[i + 1] >= 0 or start[i + 1] != tuple(o + n for o in start[i]):
            return 1, ()
    advance = tuple(b - a for a, b in zip(start[i], start[i + width], strict=True))
    groups, j = 1, i + width
    while j + width <= count:
        for q in range(width):
            first, here = i + q, j + q
            if (
                explicit[here] >= 0
                or dims[here] != dims[first]
                or step[here] != step[first]
                or start[here] != tuple(o + groups * a for o, a in zip(start[first], advance, strict=True))
            ):
                return groups, advance
        groups += 1
        j += width
    return groups, advance


def _block(
    seg: np.ndarray, dims: tuple[int, int, int], num: type, check: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Origin ``[A]`` and strides ``[A, 3]`` of ``seg`` ``[A, n]`` as one block of shape ``dims`` (read off
    its first steps), or, with ``check``, ``None`` when the block does not reproduce it exactly."""
    d0, d1, d2 = dims
    origin = seg[:, 0].astype(num)
    strides = np.zeros((seg.shape[0], 3), dtype=num)
    for k, (size, step) in enumerate(((d0, d1 * d2), (d1, d2), (d2, 1))):
        if size > 1:
            strides[:, k] = seg[:, step].astype(num) - origin
    if check and not np.array_equal(block_values(origin, strides, dims, seg.dtype), seg):
        return None
    return origin, strides


def _lines(seg: np.ndarray, runs: Runs) -> None:
    """``seg`` ``[A, n]`` as arithmetic lines, greedily longest first; stored when that takes too many."""
    n = seg.shape[1]
    wide = seg.astype(runs.num)
    if n == 1:
        runs.affine((1, 1, 1), wide[:, 0].tolist(), [[0, 0, 0]] * runs.axes)
        return
    step = np.diff(wide, axis=1)  # [A, n - 1]
    breaks = np.flatnonzero((step[:, 1:] != step[:, :-1]).any(axis=0)) + 1  # a step differing from the last
    if breaks.size > n // LINE_LIMIT + 2:
        runs.stored(seg)
        return
    cut: list[tuple[int, int]] = []
    at = 0
    while at < n:
        if at == n - 1:
            cut.append((at, n))
            break
        k = int(np.searchsorted(breaks, at, side="right"))
        end = int(breaks[k]) if k < breaks.size else n - 1  # the line's last token
        cut.append((at, end + 1))
        at = end + 1
    made = []
    for a, b in cut:
        strides = np.zeros((runs.axes, 3), dtype=runs.num)
        if b - a > 1:
            strides[:, 2] = step[:, a]
        made.append(((1, 1, b - a), wide[:, a], strides))
    if runs.is_float and not _exact(seg, made):
        runs.stored(seg)
        return
    for dims, origin, strides in made:
        runs.affine(dims, origin.tolist(), strides.tolist())


def _exact(seg: np.ndarray, made: list) -> bool:
    """Whether float lines reproduce ``seg`` in its own dtype (integer lines always do)."""
    parts = [block_values(o, s, d, seg.dtype) for d, o, s in made]
    return np.array_equal(np.concatenate(parts, axis=1), seg)


def _dims(span: Any, seg: np.ndarray) -> tuple[int, int, int] | None:
    """The block a vision span ``seg`` ``[A, n]`` may fill: its grid, frames of the grid's last sides, or
    (a span without a grid) rows as long as its first line."""
    n = seg.shape[1]
    grid = getattr(span, "grid", None)
    if grid is not None:
        t, h, w = (int(x) for x in grid)
        if t * h * w == n:
            return (t, h, w)
        if h * w and n % (h * w) == 0:
            return (n // (h * w), h, w)
    if span is None or n < 4:
        return None
    step = seg[:, 1:] - seg[:, :-1]
    changed = np.flatnonzero((step != step[:, :1]).any(axis=0))
    row = int(changed[0]) + 1 if changed.size else n
    return (1, n // row, row) if 1 < row < n and n % row == 0 else None


_TEXT_KINDS = frozenset({"text", "wrapper", "timestamp"})


def _pieces(spans: Sequence[Any], total: int) -> list[tuple[int, int, Any]]:
    """``(start, stop, span)`` to compile one by one: the vision spans, and each stretch of text,
    wrapper and timestamp spans between them as one piece (span ``None``); the whole sequence as one
    piece when the spans do not tile ``[0, total)``."""
    out: list[tuple[int, int, Any]] = []
    at = 0
    for s in spans:
        if s.start != at:
            return [(0, total, None)] if total else []
        if s.kind in _TEXT_KINDS and out and out[-1][2] is None:
            out[-1] = (out[-1][0], s.stop, None)
        else:
            out.append((s.start, s.stop, None if s.kind in _TEXT_KINDS else s))
        at = s.stop
    if at != total:
        return [(0, total, None)] if total else []
    return out


def compile_program(
    ids: np.ndarray, spans: Sequence[Any], delta: int | float, digest: str
) -> PositionProgram:
    """The program of positions ``ids`` ``[A, T]`` whose tokens ``spans`` cover in order (any spans that
    do not tile ``[0, T)`` are ignored: the whole sequence is then cut into lines).

    Blocks are first read off their grids unchecked and the whole program checked at once by expanding
    it (one pass per block shape); only when that differs anywhere is each block checked on its own,
    and one that does not reproduce its tokens cut into lines or stored."""
    pieces = _pieces(spans, ids.shape[1])
    program = _compiled(ids, pieces, delta, digest, check=False)
    if np.array_equal(program.expand(), ids):
        return program
    return _compiled(ids, pieces, delta, digest, check=True)


def _compiled(
    ids: np.ndarray, pieces: list[tuple[int, int, Any]], delta: int | float, digest: str, check: bool
) -> PositionProgram:
    axes, total = ids.shape
    runs = Runs(axes, ids.dtype.kind == "f")
    for start, stop, span in pieces:
        if stop == start:
            continue
        seg = ids[:, start:stop]
        dims = _dims(span, seg)
        fit = _block(seg, dims, runs.num, check) if dims is not None else None
        if fit is not None:
            runs.affine(dims, fit[0].tolist(), fit[1].tolist())
        else:
            _lines(seg, runs)
    return runs.program(total, delta, digest, ids.dtype)


__all__ = ["LINE_LIMIT", "Runs", "compile_program", "fold_groups"]
