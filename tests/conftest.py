"""Test-session settings shared by every test module.

Hypothesis keeps its example database and its other files in the user's cache directory
(``$XDG_CACHE_HOME/mrope/hypothesis``, else ``~/.cache/mrope/hypothesis``; ``MROPE_HYPOTHESIS_DIR``
overrides it), never inside the checkout.

The suite runs on two workers (``pytest -n 2 --dist loadfile``, scripts/test.sh): files whose tests take
minutes are collected first, so one worker starts them while the other works through the rest (xdist
hands out files in collection order); alone, pytest runs the same tests in the same order otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase


def _hypothesis_dir() -> Path:
    if explicit := os.environ.get("MROPE_HYPOTHESIS_DIR"):
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mrope" / "hypothesis"


HYPOTHESIS_DIR = _hypothesis_dir()
set_hypothesis_home_dir(HYPOTHESIS_DIR)
settings.register_profile("mrope", database=DirectoryBasedExampleDatabase(HYPOTHESIS_DIR / "examples"))
settings.load_profile("mrope")


LONG_FILES = ("tests/ops/test_ops_scripts.py", "tests/docs/test_readme.py", "tests/docs/test_examples.py")
"""Test files that run for minutes (the gpu_check dry run under the Triton interpreter, every docs
block, the examples): started first."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)  # stable: the order within each group is pytest's own
