"""``mrope.clear_caches()`` empties every cache the library keeps and ``mrope.cache_info()`` reports each
one by name; neither changes a result."""

from __future__ import annotations

import numpy as np

import mrope
from mrope import Image, Text, Video, build_positions
from mrope._caches import cached, register

PROMPT = [Text(3), Image(grid=(1, 4, 6)), Text(2), Image(grid=(1, 4, 6)), Video(grid=(2, 4, 4), fps=2.0)]
BUILDER_CACHES = ("layout.block_templates", "layout.segment_plans", "positions.grid_arrays")
KEYS = {"hits", "misses", "size", "maxsize"}


def test_cache_info_names_the_library_caches_with_their_counts() -> None:
    build_positions(PROMPT, model="qwen2-vl")
    info = mrope.cache_info()
    assert list(info) == sorted(info)
    for name in (*BUILDER_CACHES, "rules.digests", "rules.timestamp_formats", "layout.grid_blocks"):
        assert name in info, name
    for name, stats in info.items():
        assert set(stats) == KEYS, name
        assert isinstance(stats["size"], int) and stats["size"] >= 0, name
        assert stats["maxsize"] is None or stats["size"] <= stats["maxsize"], name
    assert all(info[name]["size"] > 0 for name in BUILDER_CACHES)


def test_clear_caches_empties_every_cache_and_results_stay() -> None:
    first = build_positions(PROMPT, model="qwen2-vl")
    mrope.clear_caches()
    assert all(stats["size"] == 0 for stats in mrope.cache_info().values())
    again = build_positions(PROMPT, model="qwen2-vl")  # computed afresh
    np.testing.assert_array_equal(again.ids, first.ids)
    np.testing.assert_array_equal(again.input_ids, first.input_ids)
    assert mrope.cache_info()["layout.segment_plans"]["size"] > 0
    mrope.clear_caches()
    third = build_positions(PROMPT, model="qwen2-vl")
    np.testing.assert_array_equal(third.ids, first.ids)


def test_memoised_functions_count_hits_and_misses() -> None:
    calls = []

    @cached("tests.square", maxsize=2)
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert mrope.cache_info()["tests.square"] == {"hits": 1, "misses": 2, "size": 2, "maxsize": 2}
    mrope.clear_caches()
    assert mrope.cache_info()["tests.square"] == {"hits": 0, "misses": 0, "size": 0, "maxsize": 2}
    assert square(3) == 9 and calls == [3, 4, 3]


def test_registered_dict_caches_report_their_size() -> None:
    store: dict[str, int] = {"a": 1}
    register("tests.store", store.clear, lambda: len(store), 8)
    assert mrope.cache_info()["tests.store"] == {"hits": None, "misses": None, "size": 1, "maxsize": 8}
    mrope.clear_caches()
    assert store == {} and mrope.cache_info()["tests.store"]["size"] == 0
