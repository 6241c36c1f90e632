"""The documentation site builds with ``mkdocs build --strict``, and its API page covers ``mrope.__all__``.

Strict mode turns every warning into a failure: a page left out of the navigation, a link to a page or
an anchor that does not exist, a snippet file that is missing, a docstring mkdocstrings cannot read, or
an API entry it cannot find. The build reads the sources statically and needs no network.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import mrope

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is in the dev extra")


@pytest.mark.timeout(120)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    rendered = set(re.findall(r'id="mrope\.(\w+)"', api))
    assert set(mrope.__all__) <= rendered, f"not rendered on the API page: {set(mrope.__all__) - rendered}"


def test_the_api_page_names_every_public_name_by_its_top_level_path() -> None:
    """``::: mrope.NAME`` for each name of ``mrope.__all__``, and no module path below ``mrope``."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    entries = re.findall(r"^::: (\S+)$", page, re.M)
    assert sorted(entries) == sorted(f"mrope.{name}" for name in mrope.__all__)
