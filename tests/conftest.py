"""Test-session settings shared by every test module.

Hypothesis keeps its example database and its other files in the user's cache directory
(``$XDG_CACHE_HOME/mrope/hypothesis``, else ``~/.cache/mrope/hypothesis``; ``MROPE_HYPOTHESIS_DIR``
overrides it), never inside the checkout.

The suite runs on two workers (``pytest -n 2 --dist loadfile --no-loadscope-reorder``, scripts/test.sh):
the longest files are collected first, longest first, so the two workers start them and end on short ones
(with that flag xdist hands out files in collection order, not by their number of tests); the order within each file, and of every other file, is pytest's own.
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


LONG_FILES = (
    "tests/integrations/test_integration_patch.py",  # every family's tiny model, generate included
    "tests/integrations/test_integration_patch_dropin.py",  # inductor compiles (1-3 min)
    "tests/docs/test_examples.py",
    "tests/integrations/test_integration_seed.py",
    "tests/integrations/test_transformers_common.py",  # transformers' sdist download, its mixin tests twice
    "tests/models/test_transformers_newest.py",  # tests/models, the rotary parity and patched prefills again, in subprocesses
    "tests/docs/test_readme.py",  # every python block of the README and docs
    "tests/pipeline/test_pipeline.py",  # a local Ray
    "tests/integrations/test_integration_pipeline.py",
    "tests/packing/test_pack.py",
    "tests/packing/test_shard_distributed.py",  # gloo process groups of 2 and 4, four tiny models each
    "tests/testing/test_validate.py",
    # the gpu_check dry run under the Triton interpreter, in three files of about 40 s each alone
    "tests/ops/test_gpu_check_models.py",
    "tests/ops/test_gpu_check_variants.py",
    "tests/ops/test_gpu_check_kernel.py",
)
"""Test files that run for minutes or near it, longest first (measured on the 2-core CI machine): started
first, so the last files two workers share are short ones."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)  # stable: the order within each group is pytest's own
    # xdist reports by node id: tests that share one would run unseen, counted once (pytest 9.2.0 gave
    # schemathesis' parametrized cases no ids), so a shared id stops the run
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    shared = {nodeid: n for nodeid, n in seen.items() if n > 1}
    if shared:
        raise pytest.UsageError(f"test node ids must be unique; these are shared: {shared}")
