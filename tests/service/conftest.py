"""Fixtures shared by the service tests that start real server processes."""

from __future__ import annotations

import sys

import pytest
from support.failing_app import FACTORY
from support.service_proc import ROOT, serve
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace


@pytest.fixture(scope="module")
def failing_server():
    """A server of :mod:`support.failing_app`: the service app plus routes that fail like a bug."""
    code = (
        "import os; from mrope.service._server import run; "
        f"run(port=int(os.environ['MROPE_TEST_PORT']), log_level='warning', app={FACTORY!r}, factory=True)"
    )
    with serve([sys.executable, "-c", code], env={"PYTHONPATH": str(ROOT / "tests")}) as srv:
        yield srv


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> str:
    """A tiny word-level ``tokenizer.json`` (``<``, ``>`` and unknown words) for ``MROPE_TOKENIZER``: enough
    for the timestamp text a video layout writes."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "<": 1, ">": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(path))
    return str(path)
