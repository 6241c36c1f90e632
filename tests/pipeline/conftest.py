"""A real local Ray cluster for the pipeline's Ray tests, one per test module (Ray starts once a process)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def local_ray(num_cpus: int) -> Iterator[Any]:
    """``ray`` initialised on this machine with ``num_cpus`` CPUs, quiet, shut down on the way out."""
    import ray
    import ray.data

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report over the network
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    with local_ray(2) as ray:
        yield ray


@pytest.fixture(scope="module")
def ray_one_cpu() -> Iterator[Any]:
    with local_ray(1) as ray:
        yield ray
