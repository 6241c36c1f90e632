"""The builder's caches (segment plans per rules, block templates): bounded, never aliased into
outputs, and invisible in the results.

Expected positions come from the counter rule written out here (docs/conventions.md, "Building positions";
the official Qwen2-VL get_rope_index, as in transformers 4.x: each piece starts at
``1 + max(all positions so far)``; text counts up on every axis; a Qwen2-VL block of merged grid
``(T', H', W')`` holds ``(s + i, s + j, s + k)``), not from the builder.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from mrope import Image, MRopeWarning, Text, Video, build_batch, build_positions, cache_info, clear_caches
from mrope import _positions as positions
from mrope._layout import pieces, plan_cache

START, END = 151652, 151653  # Qwen2-VL's <|vision_start|>, <|vision_end|>


def counter_rule(segs: list) -> np.ndarray:
    """Qwen2-VL released positions of wrapped images / videos (merge 2, tau(i) = i) and counted text."""
    cols: list[tuple[int, int, int]] = []

    def text(n: int) -> None:
        s = max((max(c) for c in cols), default=-1) + 1
        cols.extend((s + i, s + i, s + i) for i in range(n))

    for seg in segs:
        if isinstance(seg, Text):
            text(seg.num_tokens)
            continue
        text(1)
        s = max(max(c) for c in cols) + 1
        t, h, w = seg.grid[0], seg.grid[1] // 2, seg.grid[2] // 2
        cols.extend((s + i, s + j, s + k) for i in range(t) for j in range(h) for k in range(w))
        text(1)
    return np.asarray(cols, dtype=np.int64).T.reshape(3, -1)


PROMPT = [
    Text(3),
    Image(grid=(1, 4, 6)),
    Text(2),
    Image(grid=(1, 4, 6)),  # the same image again: one cached plan, two owners
    Video(grid=(3, 2, 4), fps=2.0),
    Image(grid=(1, 4, 6)),
    Text(1),
]


def test_cached_plans_keep_positions_spans_and_owners() -> None:
    expected = counter_rule(PROMPT)
    for _ in range(3):  # cold, then served from the caches
        p = build_positions(PROMPT, model="qwen2-vl")
        np.testing.assert_array_equal(p.ids, expected)
        assert [s.index for s in p.spans if s.kind == "image"] == [1, 3, 5]
        assert [s.index for s in p.spans if s.kind == "wrapper"] == [1, 1, 3, 3, 4, 4, 5, 5]
        assert p.image_grid_thw.tolist() == [[1, 4, 6]] * 3
        assert p.video_grid_thw.tolist() == [[3, 2, 4]]
        assert p.second_per_grid_ts.tolist() == [1.0]
        assert (p.input_ids == START).sum() == 4 and (p.input_ids == END).sum() == 4
    # a shorter prompt that starts with the same image still numbers it as its own segment 0
    q = build_positions([Image(grid=(1, 4, 6)), Text(2)], model="qwen2-vl")
    assert [s.index for s in q.spans] == [0, 0, 0, 1]
    np.testing.assert_array_equal(q.ids, counter_rule([Image(grid=(1, 4, 6)), Text(2)]))


def test_outputs_never_alias_the_caches() -> None:
    expected = counter_rule(PROMPT)
    first = build_positions(PROMPT, model="qwen2-vl")
    first.ids[:] += 1000  # a caller may write into what it got back
    first.input_ids[:] = 7
    first.image_grid_thw[:] = 0
    again = build_positions(PROMPT, model="qwen2-vl")
    np.testing.assert_array_equal(again.ids, expected)
    assert again.image_grid_thw.tolist() == [[1, 4, 6]] * 3
    batch = build_batch([PROMPT, PROMPT[:2]], model="qwen2-vl", padding_side="right")
    batch.ids[:] = -5
    batch.input_ids[:] = -5
    again = build_batch([PROMPT, PROMPT[:2]], model="qwen2-vl", padding_side="right")
    np.testing.assert_array_equal(again.ids[:, 0], expected)
    np.testing.assert_array_equal(again.ids[:, 1, :11], counter_rule(PROMPT[:2]))
    grids = build_batch([PROMPT, PROMPT], model="qwen2-vl").sequences
    assert grids[0].image_grid_thw is not grids[1].image_grid_thw
    grids[0].image_grid_thw[:] = 0  # each sequence owns its grid arrays
    assert grids[1].image_grid_thw.tolist() == [[1, 4, 6]] * 3
    assert all(not array.flags.writeable for array in positions._GRID_ARRAYS.values())
    # the cached coordinate arrays themselves refuse writes
    assert pieces._TEMPLATES and all(
        not array.flags.writeable
        for entry in pieces._TEMPLATES.values()
        for array in entry
        if isinstance(array, np.ndarray)
    )


def test_caches_stay_bounded_and_right_after_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_cache, "SEGMENT_PLAN_LIMIT", 3)
    monkeypatch.setattr(pieces, "_TEMPLATE_BUDGET", 256)
    monkeypatch.setattr(plan_cache, "_SEGMENT_PLANS", {})
    monkeypatch.setattr(plan_cache, "_last_plans", [None, None])
    monkeypatch.setattr(plan_cache, "_segment_plan_count", 0)
    monkeypatch.setattr(pieces, "_TEMPLATES", {})
    monkeypatch.setattr(pieces, "_template_tokens", 0)
    monkeypatch.setattr(positions, "_GRID_ARRAY_LIMIT", 2)
    monkeypatch.setattr(positions, "_GRID_ARRAYS", {})
    for size in range(2, 14, 2):  # more distinct images than the plan cache holds, twice over
        segs = [
            Text(1),
            Image(grid=(1, size, 4)),
            Image(grid=(1, 2, size)),
            Text(2),
            Image(grid=(1, size, 4)),
        ]
        for _ in range(2):
            np.testing.assert_array_equal(build_positions(segs, model="qwen2-vl").ids, counter_rule(segs))
            info = cache_info()
            assert info["layout.segment_plans"]["size"] <= 3
            assert info["layout.block_templates"]["size"] <= 256  # tokens
            assert info["positions.grid_arrays"]["size"] <= 2
    many = [Image(grid=(1, 2, 2))] * (positions._GRID_ARRAY_GRIDS + 1)  # a grid list too long to keep
    assert build_positions(many, model="qwen2-vl").image_grid_thw.tolist() == [[1, 2, 2]] * len(many)
    assert all(len(key) <= positions._GRID_ARRAY_GRIDS for key in positions._GRID_ARRAYS)
    # a block too big for the template budget is computed each time and never kept
    big = [Image(grid=(1, 40, 40))]
    kept = cache_info()["layout.block_templates"]["size"]
    np.testing.assert_array_equal(build_positions(big, model="qwen2-vl").ids, counter_rule(big))
    assert cache_info()["layout.block_templates"]["size"] == kept


def test_rules_do_not_share_plans() -> None:
    segs = [Image(grid=(1, 4, 8), wrap=False), Text(1)]  # merged 2 x 4
    plain = build_positions(segs, model="qwen2-vl")
    centered = build_positions(segs, model="qwen2-vl", rules={"spatial": "centered"})
    assert plain.ids[1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 4]
    # centered: the 2 x 4 grid sits in a 4 x 4 square, one row down
    assert centered.ids[1].tolist() == [1, 1, 1, 1, 2, 2, 2, 2, 4]
    assert build_positions(segs, model="qwen2-vl").ids.tolist() == plain.ids.tolist()


def test_notes_are_reported_on_every_build() -> None:
    # Qwen2.5-VL at 8 fps: second_per_grid 0.25 s x 2 tokens per second puts two patches on each t
    segs = [Video(grid=(4, 4, 4), fps=8.0), Text(1)]
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MRopeWarning)
            p = build_positions(segs, model="qwen2.5-vl")
        assert any("share t offset" in str(w.message) for w in caught)
        assert p.notes and "segment 0" in p.notes[0]


@pytest.mark.parametrize(
    ("advance", "t", "hw"),
    [
        # the official rule: text resumes one past the video's largest position (t = 5)
        ("max+1", [0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 2, 2, 2, 6, 7]),
        # transformers 5.x: the end wrapper at s + max(H', W') = 2 + 1, under the video's t values
        ("spatial", [0, 1, 2, 3, 4, 5, 3, 4], [0, 1, 2, 2, 2, 2, 3, 4]),
    ],
)
def test_wrapped_video_under_each_advance_rule(advance: str, t: list[int], hw: list[int]) -> None:
    segs = [Text(1), Video(grid=(4, 2, 2)), Text(1)]  # T' = 4 frames of one merged token
    for _ in range(2):  # planned, then from the cache
        p = build_positions(segs, model="qwen2-vl", rules={"advance": advance})
        assert p.ids.tolist() == [t, hw, hw]
        assert p.delta == max(t) + 1 - 8
        assert [(s.kind, s.start, s.stop, s.index) for s in p.spans] == [
            ("text", 0, 1, 0),
            ("wrapper", 1, 2, 1),
            ("video", 2, 6, 1),
            ("wrapper", 6, 7, 1),
            ("text", 7, 8, 2),
        ]
        assert p.input_ids.tolist() == [0, START, 151656, 151656, 151656, 151656, END, 0]


def test_big_segments_are_planned_but_not_kept() -> None:
    # frame times are part of a video's value: a long list must not stay in the cache after the build
    # (Qwen2-VL places frames by index and reads no frame times: the grid alone decides the positions)
    video = Video(grid=(2, 2, 2), frame_times=tuple(k / 50 for k in range(4000)))
    segs = [Text(1), video]
    clear_caches()
    p = build_positions(segs, model="qwen2-vl")
    np.testing.assert_array_equal(p.ids, counter_rule(segs))
    assert cache_info()["layout.segment_plans"]["size"] == 0
