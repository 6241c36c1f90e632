"""Bounds the value types check for every face: tile counts and tile orders
before anything is allocated, and timestamp formats of exactly one float field."""

from __future__ import annotations

import pytest

import mrope
from mrope import Image, LayoutRules, Video
from mrope._grid import MAX_TILES
from mrope._timestamp_format import check_timestamp_format


@pytest.mark.parametrize(
    "make",
    [
        lambda: Image(grid=(1, 4, 4), tiles=(10000, 5000), tile_order=(0,)),
        lambda: Image(grid=(1, 4, 4), tiles=(2**31 - 1, 3), tile_order=(0, 1)),
        lambda: Image(grid=(1, 4, 4), tiles=(MAX_TILES + 1, 1)),
        lambda: Video(grid=(2, 4, 4), tiles=(MAX_TILES, 2), thumbnail_grid=(1, 4, 4)),
    ],
)
def test_tile_counts_over_the_bound_are_refused(make):
    with pytest.raises(mrope.LayoutError, match=f"at most {MAX_TILES}"):
        make()


def test_tile_order_length_is_checked_first():
    with pytest.raises(mrope.LayoutError, match="permutation") as info:
        Image(grid=(1, 4, 4), tiles=(2, 2), tile_order=tuple(range(100_000)))
    assert len(str(info.value)) < 300  # the order is not echoed in full
    assert Image(grid=(1, 4, 4), tiles=(2, 2), tile_order=range(3, -1, -1)).tile_order == (3, 2, 1, 0)


@pytest.mark.parametrize(
    "fmt", ["{0.foo}", "{0[0]}", "{0}", "{x}", "{!r}", "{:{}}", "{}{}", "none", "{:q}", 5]
)
def test_timestamp_format_is_one_positional_float_field(fmt):
    with pytest.raises(mrope.LayoutError, match=r"exactly one float field, \{\} or \{:spec\}"):
        LayoutRules(timestamp_format=fmt)
    with pytest.raises(ValueError):
        check_timestamp_format(fmt)


def test_timestamp_format_width_is_bounded_in_the_library_too():
    with pytest.raises(mrope.LayoutError, match="width or precision over 64"):
        LayoutRules(timestamp_format="{:>999999999}")
    assert LayoutRules(timestamp_format="{{t}} {:>64.2f}").format_timestamp(1.5).endswith("1.50")
    assert LayoutRules(timestamp_format="{:d}").format_timestamp(2.9) == "2"


def test_every_sized_rule_has_one_range_for_the_library_and_the_schema():
    """The bounds of RULE_BOUNDS hold in LayoutRules, and their upper ends in the
    request schema's rule overrides too; every family's own values lie inside them."""
    from pydantic import ValidationError

    from mrope import models as registry
    from mrope._rule_checks import RULE_BOUNDS
    from mrope.schema import RulesOverrides

    for family in registry.families():
        for name, (lo, hi) in RULE_BOUNDS.items():
            value = getattr(family.rules, name)
            assert value is None or lo <= value <= hi, (family.name, name, value)
    for name, (lo, hi) in RULE_BOUNDS.items():
        over = hi * 2 if isinstance(hi, int) else hi * 1.5
        with pytest.raises(mrope.LayoutError, match=f"LayoutRules.{name} must be in"):
            LayoutRules(**{name: over})
        with pytest.raises(ValidationError):
            RulesOverrides(**{name: over})
        assert RulesOverrides(**{name: hi}).model_dump()[name] == hi
        if isinstance(lo, int) and lo > 0:  # int rules: the low end too
            with pytest.raises(mrope.LayoutError):
                LayoutRules(**{name: lo - 1})
