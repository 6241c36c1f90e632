"""Bin packing of sample lengths into rows of at most ``max_length`` tokens: first-fit-decreasing and streaming.

Samples are never cut (a vision block split across rows would lose its grid), so a sample longer than
``max_length`` is an error naming it. Both packers return sample indices; the rows are built elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from mrope._errors import PackingError

MODES: tuple[str, ...] = ("ffd", "stream")
"""The packing modes: ``"ffd"`` (first-fit-decreasing over all samples), ``"stream"`` (order-keeping, a
bounded number of open rows)."""


def check_length(index: int, length: int, max_length: int) -> None:
    """Refuse a sample that cannot fit a row (never cut: a vision block must stay whole)."""
    if length > max_length:
        raise PackingError(
            f"sample {index} has {length} tokens, more than max_length={max_length}: packing never cuts a "
            "sample (a vision block must stay whole); raise max_length or split the sample yourself"
        )
    if length < 1:
        raise PackingError(f"sample {index} has no tokens: a packed row holds samples of 1 token or more")


def check_max_length(max_length: int) -> None:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise PackingError(f"max_length must be an int >= 1; got {max_length!r}")


def first_fit_decreasing(lengths: Sequence[int], max_length: int) -> list[list[int]]:
    """Rows of sample indices by first-fit-decreasing: longest first, each into the first row with room.

    Rows are in the order they were opened; the samples of a row in the order they were placed (longest
    first; equal lengths keep their input order). ``O(n log n)``: the first row with room is found in a
    segment tree of the rows' free space.
    """
    check_max_length(max_length)
    for i, n in enumerate(lengths):
        check_length(i, int(n), max_length)
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    size = 1
    while size < max(1, len(lengths)):
        size *= 2
    free = [0] * (2 * size)  # a max tree over the rows' free space; unopened rows hold 0
    rows: list[list[int]] = []
    for i in order:
        need = int(lengths[i])
        if free[1] >= need:
            node = 1
            while node < size:  # descend to the leftmost row with room
                node = 2 * node if free[2 * node] >= need else 2 * node + 1
            row = node - size
        else:
            row = len(rows)
            rows.append([])
            node = size + row
            free[node] = max_length
        rows[row].append(i)
        free[node] -= need
        node //= 2
        while node:
            free[node] = max(free[2 * node], free[2 * node + 1])
            node //= 2
    return rows


def stream_rows(
    lengths: Iterable[tuple[int, int]], max_length: int, *, open_rows: int = 8
) -> Iterator[tuple[list[int], int]]:
    """Rows of ``(index, length)`` pairs as they come, keeping order: ``(indices, tokens)`` per row.

    At most ``open_rows`` rows are open; each sample goes into the first open row with room (so every
    row holds its samples in input order), and a sample that fits none closes the oldest open row.
    Rows come out in the order they were opened; with ``open_rows=1`` this is next-fit (input order
    kept across rows too). Memory is bounded by the open rows, whatever the input's length.
    """
    check_max_length(max_length)
    if isinstance(open_rows, bool) or not isinstance(open_rows, int) or open_rows < 1:
        raise PackingError(f"open_rows must be an int >= 1; got {open_rows!r}")
    rows: list[tuple[list[int], list[int]]] = []  # (indices, [tokens]) in opening order
    for index, length in lengths:
        check_length(index, length, max_length)
        room = max_length - length
        for indices, used in rows:
            if used[0] <= room:
                indices.append(index)
                used[0] += length
                break
        else:
            if len(rows) == open_rows:
                indices, used = rows.pop(0)
                yield indices, used[0]
            rows.append(([index], [length]))
        if rows and rows[0][1][0] == max_length:  # the oldest row is full: nothing more can join it
            indices, used = rows.pop(0)
            yield indices, used[0]
    for indices, used in rows:
        yield indices, used[0]


def efficiency(tokens: int, rows: int, max_length: int) -> float:
    """Packing efficiency: ``tokens / (rows * max_length)`` (1.0 for no rows)."""
    return 1.0 if rows == 0 else tokens / (rows * max_length)


__all__ = ["MODES", "check_length", "check_max_length", "efficiency", "first_fit_decreasing", "stream_rows"]
