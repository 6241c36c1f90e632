"""Small timing helpers shared by the benchmark scripts (never used by tests).

Times are medians over repeats, in seconds. Several candidates are timed round-robin (one repeat of each in
turn) so that noise from other processes hits them alike. On CUDA a repeat runs the function ``inner``
times between two events (chosen so a repeat lasts about a millisecond), so launch-bound calls are timed
as a stream of back-to-back launches.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _once(fn: Callable[[], object], device: torch.device, inner: int) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def _inner_count(fn: Callable[[], object], device: torch.device, target_s: float) -> int:
    if device.type != "cuda":
        return 1
    single = _once(fn, device, 3)
    return max(1, min(1000, int(target_s / max(single, 1e-7))))


def compare(
    fns: dict[str, Callable[[], object]],
    *,
    device: torch.device | str = "cpu",
    repeat: int = 15,
    warmup: int = 2,
    target_s: float = 1e-3,
) -> dict[str, float]:
    """Median seconds per call of every function in ``fns``, timed round-robin.

    Args:
        fns: name -> zero-argument callable.
        device: where the work runs (CUDA uses events and ``inner`` calls per repeat).
        repeat: timed repeats per function; warmup: untimed calls first (compilation, caches).
        target_s: CUDA only: rough length of one timed repeat.
    """
    device = torch.device(device)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    inner = {name: _inner_count(fn, device, target_s) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            samples[name].append(_once(fn, device, inner[name]))
    return {name: statistics.median(ts) for name, ts in samples.items()}
