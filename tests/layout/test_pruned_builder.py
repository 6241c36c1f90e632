"""Pruned vision tokens in the builder (``Image(..., keep=)``, ``Video(..., keep=)``), for every family.

Expected values come from outside the pruning code: each family's own transformers 5.24
``get_rope_index`` run on the UNPRUNED prompt (the tiny random-weight model's method; HunyuanOCR's and
GLM-Image's bound to an object holding only a config), and the unpruned prompt's token ids and
``mm_token_type_ids``. A pruned prompt must give, at every kept token, the positions that method gives
the unpruned prompt, and the unpruned ids without the dropped placeholders.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv
from support.hf_reference import MINICPM_IDS, MiniCPMRopeIndex, own_get_rope_index
from support.tiny_vlm import FAMILIES, NO_VIDEO
from transformers.models.glm_image.configuration_glm_image import GlmImageConfig
from transformers.models.glm_image.modeling_glm_image import GlmImageModel
from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLConfig
from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel

import mrope
from mrope import Image, LayoutError, Text, Video
from mrope.integrations import transformers as mt

NO_TOKEN_MASKS = frozenset({"qwen2.5-omni", "qwen3-omni", "minicpm-v-4.7"})
"""Families whose token path takes no masks (the omni and canvas engines): their pruned prompts are
built from segments."""


def _masks(rng: np.random.Generator, n: int, frames: int, *, video: bool) -> np.ndarray:
    """A random mask of ``n`` tokens in ``frames`` equal frames; for a video the first frame whole and
    the second empty (a frame that keeps nothing), the rest random; at least one token dropped."""
    mask = rng.random(n) < 0.5
    if video:
        per = n // frames
        mask[:per] = True
        mask[per : 2 * per] = False
    mask[-1] = False
    return mask


def _run_lengths(flags: np.ndarray) -> list[int]:
    """Lengths of the runs of True in ``flags``."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    return (edges[1::2] - edges[::2]).tolist()


def _expected_columns(types: np.ndarray, image_masks: list, video_masks: list) -> np.ndarray:
    """The kept columns of the unpruned prompt, from its own token types: the i-th image (video) token
    in prompt order is kept where the image (video) masks, laid end to end, say so."""
    keep = np.ones(types.size, dtype=bool)
    for kind, masks in ((1, image_masks), (2, video_masks)):
        if masks:
            keep[types == kind] = np.concatenate(masks)
    return keep


def _check(pruned: mrope.Positions, want: np.ndarray, delta: int, ids: np.ndarray, keep: np.ndarray) -> None:
    n = int(keep.sum())
    assert pruned.num_tokens == n < keep.size
    np.testing.assert_array_equal(pruned.ids, want[:, keep])
    np.testing.assert_array_equal(pruned.input_ids, ids[keep])
    # decoding continues where the unpruned prompt's does: token T + k at T + k + delta
    assert pruned.delta == delta + keep.size - n
    np.testing.assert_array_equal(pruned.window(n, n + 2)[0], keep.size + delta + np.arange(2))
    bounds = [(s.start, s.stop) for s in pruned.spans]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    # control: the kept tokens counted as if they were the whole prompt are not these positions
    assert not np.array_equal(pruned.ids, want[:, :n])


@pytest.mark.parametrize("name", FAMILIES)
def test_pruned_prompt_keeps_the_models_own_unpruned_positions(name: str) -> None:
    net = tv.model(name)
    rules = mt.model_rules(net)
    m, tm = rules.merge_size, rules.temporal_merge_size
    frames = 4
    segments = [
        Text(tv.tokenize("look")),
        Image(grid=(1, 2 * m, 3 * m)),
        Text(tv.tokenize("and")),
        Image(grid=(1, 2 * m, 2 * m))
        if name in NO_VIDEO
        else Video(grid=(frames * tm, 2 * m, 2 * m), fps=2.0),
        Text(tv.tokenize("say?")),
    ]
    kw = tv.inputs(name, [segments], with_pixels=False)
    want, delta = own_get_rope_index(net, kw)
    full = mrope.build_positions(segments, model=name, rules=rules, tokenizer=tv.tokenize)
    ids, types = kw["input_ids"][0].numpy(), full.mm_token_type_ids
    np.testing.assert_array_equal(full.input_ids, ids)
    rng = np.random.default_rng(sum(map(ord, name)))
    n_image = _run_lengths(types == 1)  # each image's tokens (a newline column a row under row_newline)
    if name in NO_VIDEO:
        image_masks, video_masks = [_masks(rng, n, 1, video=False) for n in n_image], []
    else:
        n_video = int((types == 2).sum())
        image_masks, video_masks = (
            [_masks(rng, n_image[0], 1, video=False)],
            [_masks(rng, n_video, frames, video=True)],
        )
    pruned_segments = list(segments)
    pruned_segments[1] = Image(grid=(1, 2 * m, 3 * m), keep=image_masks[0])
    pruned_segments[3] = (
        Image(grid=(1, 2 * m, 2 * m), keep=image_masks[1])
        if name in NO_VIDEO
        else Video(grid=(frames * tm, 2 * m, 2 * m), fps=2.0, keep=video_masks[0])
    )
    pruned = mrope.build_positions(pruned_segments, model=name, rules=rules, tokenizer=tv.tokenize)
    keep = _expected_columns(types, image_masks, video_masks)
    _check(pruned, want, delta, ids, keep)
    np.testing.assert_array_equal(pruned.mm_token_type_ids, types[keep])
    np.testing.assert_array_equal(pruned.video_grid_thw, full.video_grid_thw)
    assert mrope.count_tokens(pruned_segments, model=name, rules=rules, tokenizer=tv.tokenize) == keep.sum()
    # in a batch, left-padded next to an unpruned row: the same row, and the other row as unpruned
    other = [Text(tv.tokenize("a much longer question than that one"))]
    batch = mrope.build_batch([pruned_segments, other], model=name, rules=rules, tokenizer=tv.tokenize)
    n = pruned.num_tokens
    np.testing.assert_array_equal(batch.ids[:, 0, -n:], pruned.ids)
    np.testing.assert_array_equal(batch.input_ids[0, -n:], pruned.input_ids)
    assert batch.attention_mask[0].sum() == n and batch.deltas[0] == pruned.delta
    # the token path: the pruned ids, the unpruned grids and one mask per grid
    masks = {"image_keep": image_masks, "video_keep": video_masks or None}
    grids = {"image_grid_thw": full.image_grid_thw, "video_grid_thw": full.video_grid_thw}
    # every other family hands over its mm_token_type_ids, the rest have them read from the placeholders
    types = {"mm_token_type_ids": batch.mm_token_type_ids} if FAMILIES.index(name) % 2 else {}
    if name in NO_TOKEN_MASKS:
        with pytest.raises(mrope.TokenError, match="do not take masks on token ids"):
            mrope.numpy_rope_index(batch.input_ids, **grids, rules=rules, **masks)
    else:
        got, deltas = mrope.get_rope_index(
            torch.from_numpy(batch.input_ids),
            **grids,
            attention_mask=torch.from_numpy(batch.attention_mask),
            rules=rules,
            second_per_grid_ts=full.second_per_grid_ts,
            **masks,
            **types,
        )
        np.testing.assert_array_equal(got[:, 0, -n:].numpy(), want[:, keep])
        assert (got[:, 0, :-n] == rules.pad_position).all() and deltas[0, 0] == pruned.delta
        np.testing.assert_array_equal(got[:, 1].numpy(), batch.ids[:, 1])
    alone = mrope.build_positions(other, model=name, rules=rules, tokenizer=tv.tokenize)
    np.testing.assert_array_equal(batch.sequences[1].ids, alone.ids)
    assert np.shares_memory(batch.sequences[0].ids, batch.ids)


def test_hunyuan_ocr_pruned_images_keep_the_models_positions() -> None:
    """Four axes (sequence, w, h, image index), the border tokens and the newline column inside the image."""

    class Shim:
        get_rope_index = HunYuanVLModel.get_rope_index
        get_vision_position_ids = HunYuanVLModel.get_vision_position_ids
        rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 16, 16, 16]}
        config = HunYuanVLConfig(
            text_config={
                "hidden_size": 1024,
                "num_attention_heads": 16,
                "head_dim": 128,
                "rope_parameters": rope,
            }
        )

    rules = mrope.models.get_family("tencent/HunyuanOCR").rules
    segments = [Text(3), Image((1, 4, 6)), Text(2), Image((1, 4, 4)), Text(1)]
    full = mrope.build_positions(segments, rules=rules)
    types = full.mm_token_type_ids
    want, delta = Shim().get_rope_index(
        torch.from_numpy(full.input_ids[None]),
        torch.from_numpy(types[None]),
        torch.from_numpy(full.image_grid_thw),
        torch.ones(1, full.num_tokens, dtype=torch.long),
    )
    rng = np.random.default_rng(3)
    sizes = [s.stop - s.start for s in full.spans if s.kind == "image"]
    n1 = sum(sizes[:3])
    masks = [_masks(rng, n1, 1, video=False), np.zeros(sum(sizes) - n1, dtype=bool)]  # the second: all gone
    pruned = mrope.build_positions(
        [Text(3), Image((1, 4, 6), keep=masks[0]), Text(2), Image((1, 4, 4), keep=masks[1]), Text(1)],
        rules=rules,
    )
    _check(pruned, want[:, 0].numpy(), int(delta[0, 0]), full.input_ids, _expected_columns(types, masks, []))


def test_glm_image_pruned_source_image_keeps_the_models_positions() -> None:
    class Shim:
        get_rope_index = GlmImageModel.get_rope_index
        get_vision_position_ids = GlmImageModel.get_vision_position_ids
        config = GlmImageConfig()

    rules = mrope.models.get_family("glm-image").rules
    segments = [Text(4), Image((1, 3, 5)), Text(6), Image((1, 4, 4), generate=True)]
    full = mrope.build_positions(segments, rules=rules)
    shim = Shim()
    want, _ = shim.get_rope_index(
        torch.from_numpy(full.input_ids[None]), torch.from_numpy(full.image_grid_thw), torch.tensor([2])
    )
    mask = _masks(np.random.default_rng(5), 15, 1, video=False)
    pruned = mrope.build_positions([Text(4), Image((1, 3, 5), keep=mask), Text(6), segments[3]], rules=rules)
    keep = _expected_columns(full.mm_token_type_ids, [mask], [])
    np.testing.assert_array_equal(pruned.ids, want[:, 0].numpy()[:, keep])
    np.testing.assert_array_equal(pruned.input_ids, full.input_ids[keep])
    assert pruned.delta == full.delta == 0  # GLM-Image decodes at its generation ids
    np.testing.assert_array_equal(pruned.generation_ids, full.generation_ids)
    cache = shim._cached_decode_position_ids[0].numpy()
    np.testing.assert_array_equal(pruned.generation_ids, cache[:, : full.generation_ids.shape[1]])


def test_minicpm_sliced_image_and_video_in_prompt_order() -> None:
    """MiniCPM-V 4.7's canvas: a thumbnail first, then the slices between their markers; sliced frames."""
    rules = mrope.models.get_family("minicpm-v-4.7").rules_for("transformers5")
    rules = dataclasses.replace(rules, **{k: v for k, v in MINICPM_IDS.items() if hasattr(rules, k)})
    segments = [
        Text([5, 6]),
        Image((1, 16, 24), tiles=(3, 2), thumbnail_grid=(1, 12, 8)),
        Text([7]),
        Video((2, 16, 8), tiles=(1, 2), thumbnail_grid=(1, 4, 8)),
    ]
    full = mrope.build_positions(segments, rules=rules)
    types = full.mm_token_type_ids
    want, delta = MiniCPMRopeIndex().get_rope_index(
        torch.from_numpy(full.input_ids[None]),
        torch.from_numpy(types[None]),
        torch.from_numpy(full.image_grid_thw[:, 1:]),
        torch.from_numpy(full.video_grid_thw[:, 1:]),
        "16x",
        torch.ones(1, full.num_tokens, dtype=torch.long),
    )
    rng = np.random.default_rng(9)
    masks = [_masks(rng, int((types == kind).sum()), 1, video=False) for kind in (1, 2)]
    pruned_segments = list(segments)
    pruned_segments[1] = dataclasses.replace(segments[1], keep=masks[0])
    pruned_segments[3] = dataclasses.replace(segments[3], keep=masks[1])
    pruned = mrope.build_positions(pruned_segments, rules=rules)
    _check(
        pruned,
        want[:, 0].numpy(),
        int(delta[0, 0]),
        full.input_ids,
        _expected_columns(types, masks[:1], masks[1:]),
    )


def test_token_path_masks_are_checked() -> None:
    full = mrope.build_positions(
        [Text(2), Image((1, 4, 4)), Text(1), Image((1, 4, 8)), Text(1)], model="qwen2-vl"
    )
    args = {"image_grid_thw": full.image_grid_thw, "model": "qwen2-vl"}
    with pytest.raises(mrope.TokenError, match="image_keep\\[1\\] must be a bool mask of the grid's 8"):
        mrope.numpy_rope_index(full.input_ids[None], **args, image_keep=[None, np.ones(4, dtype=bool)])
    with pytest.raises(mrope.TokenError, match="one mask or None per grid: 2 grids; got 1"):
        mrope.numpy_rope_index(full.input_ids[None], **args, image_keep=[None])
    # both images dropped whole: two empty wrapper pairs, each takes the next image
    gone = [np.zeros(4, dtype=bool), np.zeros(8, dtype=bool)]
    ids = full.input_ids[full.mm_token_type_ids == 0]
    pos, delta = mrope.numpy_rope_index(ids[None], **args, image_keep=gone)
    np.testing.assert_array_equal(pos[:, 0], full.ids[:, full.mm_token_type_ids == 0])
    assert delta[0] == full.delta + 12
    without = np.concatenate([full.input_ids[:2], full.input_ids[8:]])  # image 0 and its wrappers gone
    with pytest.raises(mrope.TokenError, match="must sit in an empty wrapper pair"):
        mrope.numpy_rope_index(without[None], **args, image_keep=[gone[0], None])


def test_masks_are_checked() -> None:
    with pytest.raises(LayoutError, match=r"expected 8, got 3"):
        mrope.build_positions([Video((2, 4, 4), keep=[True, False, True])], model="qwen2-vl")
    with pytest.raises(LayoutError, match="bool"):
        Image((1, 4, 4), keep=[1, 0, 1, 1])
    with pytest.raises(LayoutError, match="1-D"):
        Video((2, 4, 4), keep=np.ones((2, 8), dtype=bool))
    with pytest.raises(LayoutError, match="generate"):
        Image((1, 4, 4), generate=True, keep=[True] * 4)
    a, b = (
        Image((1, 4, 4), keep=[True, False, True, True]),
        Image((1, 4, 4), keep=np.array([1, 0, 1, 1], bool)),
    )
    assert a == b and hash(a) == hash(b) and a != Image((1, 4, 4)) and a != Image((1, 4, 4), keep=[True] * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = mrope.build_positions([Text(2), Image((1, 4, 4), keep=[True] * 4)], model="qwen2-vl")
    np.testing.assert_array_equal(
        kept.ids, mrope.build_positions([Text(2), Image((1, 4, 4))], model="qwen2-vl").ids
    )
