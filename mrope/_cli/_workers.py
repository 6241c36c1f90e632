"""An ordered, bounded map over worker processes, for long CLI jobs (``mrope batch --workers N``).

Items go to the workers in chunks; results come back in input order, and at most ``2 * workers`` chunks
are in flight at once, so memory stays flat in the number of items however fast the input is read. The
job's state (its options, a loaded tokenizer or checkpoint) reaches the workers once, when they start:
inherited with the ``fork`` start method where the platform has it, else pickled once per worker.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 16
"""Items sent to a worker at once (fewer round trips than one at a time, small enough to keep it busy)."""

_STATE: dict[str, Any] = {}
"""The worker process's function, set once by :func:`_start`."""


def _start(fn: Callable[[Any], Any]) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the job (and then the workers, once their
    # chunk is done), so a worker ignores it rather than dying mid-chunk with a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _STATE["fn"] = fn


def _run_chunk(items: list[Any]) -> list[Any]:
    fn = _STATE["fn"]
    return [fn(item) for item in items]


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int, chunk: int = CHUNK) -> Iterator[R]:
    """``fn`` over ``items`` in input order: in this process with ``workers <= 1``, else in ``workers``
    processes (``fn`` and what it holds go to each worker once, when it starts). An exception in ``fn``
    is re-raised here, at its item's place in the order; the chunks still in flight are then dropped."""
    if workers <= 1:
        yield from map(fn, items)
        return
    source = iter(items)
    pool = ProcessPoolExecutor(workers, mp_context=_context(), initializer=_start, initargs=(fn,))
    pending: deque[Future[list[R]]] = deque()
    try:
        while True:
            while len(pending) < 2 * workers:
                batch = list(islice(source, chunk))
                if not batch:
                    break
                pending.append(pool.submit(_run_chunk, batch))
            if not pending:
                return
            yield from pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["CHUNK", "ordered_map"]
