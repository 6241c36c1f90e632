"""Test-session settings shared by every test module.

Hypothesis keeps its example database and its other files in the user's cache directory
(``$XDG_CACHE_HOME/mrope/hypothesis``, else ``~/.cache/mrope/hypothesis``; ``MROPE_HYPOTHESIS_DIR``
overrides it), never inside the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

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
