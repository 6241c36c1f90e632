"""Moved names of the faces keep a warning alias at their old path."""

from __future__ import annotations

import pytest

import mrope.pipeline
import mrope.schema.text


def test_pipeline_load_tokenizer_is_a_warning_alias_of_the_schema_one() -> None:
    with pytest.warns(DeprecationWarning, match="mrope.schema.text.load_tokenizer"):
        moved = mrope.pipeline.load_tokenizer
    assert moved is mrope.schema.text.load_tokenizer
