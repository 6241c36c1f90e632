"""The range form of the fill engine (CounterPlan.fill_range, fill_pieces with lo / hi) against the whole
sequence built by mrope.build_positions (checked against transformers elsewhere), cut here: every range
of a sequence whose blocks are wrapped, tiled, multi-frame and cut mid-row, under both advance rules."""

from __future__ import annotations

import numpy as np
import pytest

import mrope
from mrope import Image, Text, Video
from mrope._builder import plan_sequence
from mrope.models import resolve_rules

SEGMENTS = [
    Text([5, 6, 7, 8, 9]),
    Image(grid=(1, 8, 12)),
    Text(3),
    Video(grid=(6, 4, 6), fps=2.0),
    Text([11]),
    Image(grid=(1, 12, 4)),
    Text([12, 13, 14, 15]),
]


@pytest.mark.parametrize("convention", ["released", "transformers5"])
@pytest.mark.parametrize("name", ["qwen2-vl", "qwen2.5-vl", "glm-4.1v", "qwen3-vl"])
def test_every_range_equals_the_whole_sequence_cut(name: str, convention: str) -> None:
    lay = resolve_rules(name, None, convention)
    tokenizer = lambda text: [7] * len(text)  # noqa: E731  (timestamp text, where the rules write it)
    whole = mrope.build_positions(SEGMENTS, rules=lay, tokenizer=tokenizer)
    plan = plan_sequence(SEGMENTS, lay, tokenizer)
    assert plan.fills_ranges
    n = whole.num_tokens
    types_whole = whole.mm_token_type_ids
    cuts = sorted(
        {0, n, *range(0, n, 7), *(s.start for s in whole.spans), *(s.stop - 1 for s in whole.spans)}
    )
    for lo in cuts:
        for hi in (h for h in cuts if h >= lo):
            ids = np.full((lay.num_axes, hi - lo), -1, dtype=np.int64)
            tokens = np.full(hi - lo, -1, dtype=np.int64)
            types = np.zeros(hi - lo, dtype=np.int64)
            delta = plan.fill_range(ids, tokens, types, lo, hi, n)
            assert delta == whole.delta
            assert np.array_equal(ids, whole.ids[:, lo:hi]), (lo, hi)
            assert np.array_equal(tokens, whole.input_ids[lo:hi]), (lo, hi)
            assert np.array_equal(types, types_whole[lo:hi]), (lo, hi)
    # negative control: a range filled as if it began one token later is not the cut
    ids = np.empty((lay.num_axes, 40), dtype=np.int64)
    plan.fill_range(ids, np.empty(40, np.int64), np.zeros(40, np.int64), 31, 71, n)
    assert not np.array_equal(ids, whole.ids[:, 30:70])
