"""The multimodal invariance (crop, tile and frame-order changes keep coordinates consistent), at model
level: rotated q and k of layer 0 of a patched tiny random-weight model, fed mrope's positions.

Why the expected values hold by hand: without pixels every image (video) placeholder carries the same token
embedding, and layer 0's q and k are per-token projections of it, so before rotation all placeholder q
(k) are equal. After rotation a token's q and k depend only on its (t, h, w), and the score between two
tokens only on their two positions. So tokens that the released rule (README "Layout rules", written out
here) places at equal positions must have equal rotated q, k and equal scores, against the text before
them too; and scores at equal position differences must be equal. Each check has a counterpart that must
differ (the other rule, a wrong crop origin), so a broken layout fails.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import patched, recording

import mrope
from mrope import Image, Text, Video
from mrope.integrations import transformers as mt

ATOL = 1e-6
"""fp32: tokens with equal inputs and positions go through the same arithmetic."""

DIFFERS = 1e-4
"""The least max score difference that counts as "differs": 100 x ATOL (scores are O(0.1); measured
differences of the wrong layouts: about 9e-4 for a crop moved by (1, 2), 0.15 for independent tiles)."""

PREFIX = tv.tokenize("ab")
"""Two text tokens; then the vision_start wrapper: the image starts at position 3."""


def _layer0(name: str, segments: list, **rule_changes: object) -> tuple[torch.Tensor, torch.Tensor, object]:
    """Rotated layer-0 q ``[heads, L, d]`` and k (repeated to q's heads) of the patched model, given the
    positions ``mrope.build_batch`` builds under the model's rules with ``rule_changes``, and the row's
    :class:`mrope.Positions`."""
    net = tv.model(name)
    rules = mt.model_rules(net).replace(**rule_changes)
    batch = mrope.build_batch([segments], model=name, rules=rules, tokenizer=tv.tokenize, pad_token_id=0)
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    records: list[tuple[torch.Tensor, ...]] = []
    with patched(net), recording(module, records):
        tv.logits(name, mt.model_inputs(batch, net), own_positions=False)
    q, k = records[0][0][0], records[0][1][0]
    return q, k.repeat_interleave(q.shape[0] // k.shape[0], dim=0), batch.sequences[0]


def _scores(qk: tuple, rows: np.ndarray, cols: np.ndarray) -> torch.Tensor:
    """q.k scores ``[heads, len(rows), len(cols)]`` of layer 0."""
    q, k, _ = qk
    return q[:, rows] @ k[:, cols].transpose(-1, -2)


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _image_span(seq: object) -> object:
    (span,) = [s for s in seq.spans if s.kind == "image"]
    return span


# ------------------------------------------------------------------------------------------------- crop

WHOLE = Image(grid=(1, 8, 12))
"""Merged 4 x 6."""
CROP_ORIGIN = (1, 2)
"""The crop's (row, col) in WHOLE's merged grid; the crop is merged 2 x 3."""


def _crop_case(origin: tuple[int, int], rule: str) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """(crop scores, whole-region scores) of crop tokens against the prefix and the crop, and the gaps."""
    whole = _layer0("qwen2-vl", [Text(PREFIX), WHOLE], crop=rule)
    crop = _layer0("qwen2-vl", [Text(PREFIX), Image(grid=(1, 4, 6), origin=origin)], crop=rule)
    ws, cs = _image_span(whole[2]), _image_span(crop[2])
    r, c = CROP_ORIGIN  # the pixels the crop really holds
    region = np.array([ws.start + (r + i) * 6 + (c + j) for i in range(2) for j in range(3)])
    mine = np.arange(cs.start, cs.stop)
    prefix = np.arange(cs.start)  # text and vision_start: same tokens at the same positions in both
    inner = _gap(_scores(crop, mine, mine), _scores(whole, region, region))
    outer = _gap(_scores(crop, mine, prefix), _scores(whole, region, prefix))
    return crop[2].ids[:, mine], whole[2].ids[:, region], inner, outer


def test_a_crop_keeping_its_origin_scores_like_its_pixels_in_the_whole_image() -> None:
    crop_ids, region_ids, inner, outer = _crop_case(CROP_ORIGIN, "keep")
    # the released rule written out: block start s = 3, h = s + row, w = s + col in the whole merged grid
    s, (r, c) = 3, CROP_ORIGIN
    hand = np.array([[s, s + r + i, s + c + j] for i in range(2) for j in range(3)]).T
    np.testing.assert_array_equal(crop_ids, hand)
    np.testing.assert_array_equal(region_ids, hand)
    assert inner <= ATOL and outer <= ATOL, (inner, outer)


def test_a_crop_without_its_origin_keeps_only_its_inner_geometry() -> None:
    # crop="reset" (the origin ignored) and a wrong origin: a translated region, so the scores among the
    # crop's own tokens still match (relativity), but those against the text before it cannot
    for origin, rule in ((CROP_ORIGIN, "reset"), ((0, 0), "keep")):
        _, _, inner, outer = _crop_case(origin, rule)
        assert inner <= ATOL, (origin, rule, inner)
        assert outer > DIFFERS, (origin, rule, outer)


# ------------------------------------------------------------------------------------------------ tiles

TILE_ORDER = (3, 1, 5, 0, 2, 4)
"""A permutation of WHOLE's 3 x 2 tiles (cols, rows), each merged 2 x 2."""


def _tile_match(tiles_rule: str, order: tuple[int, ...] | None) -> tuple[float, float, float]:
    """Match each tile token of a tiled WHOLE (via its span's tile (row, col)) to the untiled token at the
    same pixels; gaps of rotated q, k and of all scores (prefix included) between the two."""
    untiled = _layer0("qwen2-vl", [Text(PREFIX), WHOLE], tiles=tiles_rule)
    tiled = _layer0(
        "qwen2-vl", [Text(PREFIX), Image(grid=(1, 8, 12), tiles=(3, 2), tile_order=order)], tiles=tiles_rule
    )
    start = _image_span(untiled[2]).start
    mine, theirs = list(range(start)), list(range(start))
    spans = [s for s in tiled[2].spans if s.kind == "image"]
    assert sorted(s.tile for s in spans) == [(r, c) for r in range(2) for c in range(3)]
    for span in spans:
        (_, th, tw), (r, c) = span.grid, span.tile
        for i in range(th):
            for j in range(tw):
                mine.append(span.start + i * tw + j)
                theirs.append(start + (r * th + i) * 6 + (c * tw + j))
    a, b = np.array(mine), np.array(theirs)
    return (
        _gap(tiled[0][:, a], untiled[0][:, b]),
        _gap(tiled[1][:, a], untiled[1][:, b]),
        _gap(_scores(tiled, a, a), _scores(untiled, b, b)),
    )


def test_global_tiles_in_any_order_score_like_the_untiled_image() -> None:
    for order in (None, TILE_ORDER):
        q_gap, k_gap, score_gap = _tile_match("global", order)
        assert max(q_gap, k_gap, score_gap) <= ATOL, (order, q_gap, k_gap, score_gap)


def test_independent_tiles_do_not() -> None:
    *_, score_gap = _tile_match("independent", TILE_ORDER)
    assert score_gap > DIFFERS


# ------------------------------------------------------------------------------------------ frame time


def _patch_tokens(seq: object, patch: int) -> np.ndarray:
    (span,) = [s for s in seq.spans if s.kind == "video"]
    per = span.grid[1] * span.grid[2]
    return np.arange(span.start + patch * per, span.start + (patch + 1) * per)


def test_video_time_follows_seconds_not_frame_index() -> None:
    """Qwen2.5-VL: the same 4 s clip at 1 fps (2 temporal patches of 2 s) and 2 fps (4 patches of 1 s).
    Under its seconds rule patch i starts at t = s + tokens_per_second * seconds (the model config's
    tokens_per_second): the 1 fps patches i and the 2 fps patches 2i sit at equal positions, and the score
    between two patches depends only on their distance in seconds. Under the index rule (Qwen2-VL's) it
    follows the patch index instead, and the two clips disagree."""
    name = "qwen2.5-vl"
    tps = tv.model(name).config.vision_config.tokens_per_second
    clips = {fps: [Text(PREFIX), Video(grid=(int(4 * fps), 4, 4), fps=fps)] for fps in (1.0, 2.0)}
    low, high = (_layer0(name, clips[fps]) for fps in (1.0, 2.0))
    s = 3
    for seq, seconds_per_patch in ((low[2], 2.0), (high[2], 1.0)):
        n = seq.spans[2].grid[0]
        starts = [int(seq.ids[0, _patch_tokens(seq, i)[0]]) for i in range(n)]
        assert starts == [s + int(tps * seconds_per_patch * i) for i in range(n)]
    for i, j in ((0, 1), (1, 0), (1, 1)):  # 1 fps patches (i, j) <-> 2 fps patches (2i, 2j)
        got = _scores(low, _patch_tokens(low[2], i), _patch_tokens(low[2], j))
        want = _scores(high, _patch_tokens(high[2], 2 * i), _patch_tokens(high[2], 2 * j))
        assert _gap(got, want) <= ATOL, (i, j)
    # equal time distance inside one clip: 2 fps patches (0, 2) and (1, 3) are both 2 s apart
    first = _scores(high, _patch_tokens(high[2], 0), _patch_tokens(high[2], 2))
    later = _scores(high, _patch_tokens(high[2], 1), _patch_tokens(high[2], 3))
    assert _gap(first, later) <= ATOL
    low_i, high_i = (_layer0(name, clips[fps], temporal="index") for fps in (1.0, 2.0))
    got = _scores(low_i, _patch_tokens(low_i[2], 0), _patch_tokens(low_i[2], 1))
    want = _scores(high_i, _patch_tokens(high_i[2], 0), _patch_tokens(high_i[2], 2))
    assert _gap(got, want) > DIFFERS
