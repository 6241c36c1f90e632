"""The piece table (mrope.packing._pieces: the counter run across many samples with cumulative sums,
token ranges written from it) against each sample built whole by mrope.build_positions (checked against
transformers elsewhere), the samples laid end to end and cut at every span edge: every counter family
under both conventions, and the counter rules no family uses today (reset and centred blocks, crop
origins, independent tiles, grid borders) set by hand."""

from __future__ import annotations

import dataclasses
from itertools import chain

import numpy as np
import pytest

import mrope
from mrope import Image, Text, Video
from mrope._builder import plan_sequence
from mrope._errors import LayoutError, MRopeError
from mrope._grid import MAX_POSITION
from mrope._layout import engine_for
from mrope.models import names, resolve_rules
from mrope.packing._pieces import Out, piece_table, write_ranges
from mrope.packing._shard import vision_map, vision_spans


def _tok(text: str) -> list[int]:
    return [700 + ord(c) % 50 for c in text]


def _samples(lay) -> list[list]:  # noqa: ANN001
    m = lay.merge_size
    tiled = Image(grid=(1, 4 * m, 6 * m), tiles=(2, 2))
    video = Video(grid=(4, 2 * m, 3 * m), fps=2.0)
    candidates = [
        [Text([5, 6, 7]), Image(grid=(1, 2 * m, 3 * m)), Text(3), video, Text([11])],
        [Text([9])],
        [tiled, Text([12, 13]), Image(grid=(1, 4 * m, 2 * m), origin=(3, 5)), Text(2)],
        [Image(grid=(1, 2 * m, 2 * m)), Image(grid=(1, 2 * m, 4 * m), wrap=False), Text([4, 4, 4, 4])],
        [Text(_tok("a video please")), Video(grid=(2, 2 * m, 2 * m), fps=1.0), Text(5)],
        # blocks long enough to be cut from their templates (frames of 24 x 24 merged tokens)
        [Text([8]), Video(grid=(4, 24 * m, 24 * m), fps=2.0), Image(grid=(1, 24 * m, 32 * m)), Text(3)],
    ]
    out = []
    for sample in candidates:  # keep what the rules take (some take no videos, some no tiles)
        kept = []
        for seg in sample:
            try:
                mrope.build_positions([seg], rules=lay, tokenizer=_tok)
            except MRopeError:
                continue
            kept.append(seg)
        out.append(kept)
    return out


def _rules() -> list:
    out = []
    for name in names():
        for convention in ("released", "transformers5"):
            lay = resolve_rules(name, None, convention)
            if engine_for(lay) == "counter":
                out.append(pytest.param(lay, id=f"{name}-{convention}"))
    base = resolve_rules("qwen2-vl", None, "released")
    for label, changes in {
        "reset": {"spatial": "reset"},
        "reset-spatial-advance": {"spatial": "reset", "advance": "spatial"},
        "centered": {"spatial": "centered"},
        "crop-keep": {"crop": "keep"},
        "independent-tiles": {"tiles": "independent"},
        "grid-border": {"grid_border": True},
        "newline-frame-block": {"row_newline": True, "frame_block": True},
    }.items():
        out.append(pytest.param(dataclasses.replace(base, **changes), id=label))
    return out


@pytest.mark.parametrize("lay", _rules())
def test_ranges_of_the_table_equal_the_samples_built_whole(lay) -> None:  # noqa: ANN001
    samples = _samples(lay)
    whole = [mrope.build_positions(s, rules=lay, tokenizer=_tok) for s in samples]
    ids = np.concatenate([p.ids for p in whole], axis=1)
    tokens = np.concatenate([p.input_ids for p in whole])
    types = np.concatenate([p.mm_token_type_ids for p in whole])
    starts = np.cumsum([0] + [p.num_tokens for p in whole])
    spans = vision_spans(whole, starts[:-1])
    item, index = vision_map(spans, np.arange(len(tokens)), types)
    assert (item >= 0).any() and (types > 0).any()

    plans = [plan_sequence(s, lay, _tok) for s in samples]
    table = piece_table(
        lay,
        list(chain.from_iterable(p.pieces for p in plans)),
        list(chain.from_iterable(p.owners for p in plans)),
        np.array([len(p.pieces) for p in plans], dtype=np.int64),
        np.zeros((len(plans), 4), dtype=np.int64),
        list(range(len(plans))),
    )
    assert np.array_equal(table.bounds, starts)
    if not lay.generates_images:
        assert table.deltas.tolist() == [p.delta for p in whole]

    # every range between span edges (and every 5th token), within one sample and across samples
    edges = {int(starts[i]) + s.start for i, p in enumerate(whole) for s in p.spans}
    edges |= {int(starts[i]) + s.stop - 1 for i, p in enumerate(whole) for s in p.spans}
    cuts = np.array(sorted(edges | set(range(0, len(tokens), 5)) | {len(tokens)}))
    lo, hi = np.meshgrid(cuts, cuts, indexing="ij")
    keep = (hi > lo) & (hi - lo <= 60)
    lo, count = lo[keep], (hi - lo)[keep]
    far_lo = np.repeat(np.arange(0, len(tokens), 97), 2)  # and long ones
    far_count = np.minimum(np.tile([700, 1500], len(far_lo) // 2), len(tokens) - far_lo)
    lo, count = np.concatenate([lo, far_lo]), np.concatenate([count, far_count])
    assert count.max() >= 700  # past _WHOLE: blocks cut from their templates
    got = _write(table, lo, count)
    at = np.concatenate([np.arange(a, a + c) for a, c in zip(lo.tolist(), count.tolist(), strict=True)])
    assert np.array_equal(got.ids, ids[:, at])
    assert np.array_equal(got.tokens, tokens[at])
    assert np.array_equal(got.types, types[at])
    assert np.array_equal(got.item, item[at])
    assert np.array_equal(got.index, index[at])
    # negative control: the same ranges one token further on are not these
    shifted = _write(table, np.minimum(lo + 1, len(tokens) - count), count)
    assert not np.array_equal(shifted.ids, ids[:, at])


def _write(table, lo: np.ndarray, count: np.ndarray) -> Out:  # noqa: ANN001
    total = int(count.sum())
    out = Out(
        np.full((3, total), -7, dtype=np.int64),
        np.full(total, -7, dtype=np.int64),
        np.zeros(total, dtype=np.int64),
        np.full(total, -1, dtype=np.int64),
        np.full(total, -1, dtype=np.int64),
    )
    write_ranges(table, lo, count, np.cumsum(count) - count, out)
    return out


def test_a_sample_past_the_largest_position_is_refused_by_name() -> None:
    lay = resolve_rules("qwen2-vl", None, "released")
    past = [Text(MAX_POSITION - 4), Image(grid=(1, 20, 20))]  # its block would reach 2**62 + 5
    samples = [[Text([1, 2])], past]
    plans = [plan_sequence(s, lay, _tok) for s in samples]
    with pytest.raises(LayoutError, match=r"sample 7: positions overflow: image \(segment 1\)"):
        piece_table(
            lay,
            list(chain.from_iterable(p.pieces for p in plans)),
            list(chain.from_iterable(p.owners for p in plans)),
            np.array([len(p.pieces) for p in plans], dtype=np.int64),
            np.zeros((2, 4), dtype=np.int64),
            [3, 7],
        )
