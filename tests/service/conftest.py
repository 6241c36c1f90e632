"""Fixtures shared by the service tests that start real server processes."""

from __future__ import annotations

import sys

import pytest
from support.failing_app import FACTORY
from support.service_proc import ROOT, serve


@pytest.fixture(scope="module")
def failing_server():
    """A server of :mod:`support.failing_app`: the service app plus routes that fail like a bug."""
    code = (
        "import os; from mrope.service.server import run; "
        f"run(port=int(os.environ['MROPE_TEST_PORT']), log_level='warning', app={FACTORY!r}, factory=True)"
    )
    with serve([sys.executable, "-c", code], env={"PYTHONPATH": str(ROOT / "tests")}) as srv:
        yield srv
