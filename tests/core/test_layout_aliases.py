"""The old paths of the builder split (issue 20) are aliases that warn and give the same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

import mrope
from mrope import builder, grid, positions, token_ids
from mrope.layout import canvas, omni


@pytest.mark.parametrize(
    ("old", "new"),
    [("mrope.tokens", token_ids), ("mrope.timeline", omni), ("mrope.canvas", canvas)],
)
def test_module_stubs_warn_and_are_the_new_modules(
    monkeypatch: pytest.MonkeyPatch, old: str, new: object
) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=old.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is new


def test_moved_names_warn_and_are_the_new_objects() -> None:
    with pytest.warns(DeprecationWarning, match=r"mrope\.rope_index has moved to mrope\.numpy_rope_index"):
        assert mrope.rope_index is token_ids.numpy_rope_index
    with pytest.warns(DeprecationWarning, match=r"rope_index has moved"):
        assert token_ids.rope_index is token_ids.numpy_rope_index  # mrope.tokens.rope_index
    with pytest.warns(DeprecationWarning, match=r"mrope\.builder\.merged_grid has moved to mrope\.grid"):
        assert builder.merged_grid is grid.merged_grid
    with pytest.warns(DeprecationWarning, match=r"mrope\.builder\.Positions has moved to mrope\.positions"):
        assert builder.Positions is positions.Positions
    with pytest.raises(AttributeError):
        builder.no_such_name  # noqa: B018
