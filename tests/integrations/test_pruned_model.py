"""Pruned video tokens inside tiny random-weight models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL with its deepstack
features): :func:`mrope.integrations.transformers.pruned_video_inputs` on a patched model.

Expected values come from the unpatched transformers 5.24 model itself run on the FULL prompt (its own
vision tower and embeddings, its own positions from the family's get_rope_index) with a 4-D attention
mask in which no token may attend a dropped one: at every kept token its logits are what the pruned
sequence must give. A control with positions re-counted as if the kept tokens were the whole prompt
must differ.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv

from mrope import Image, LayoutError, Text, Video
from mrope.integrations import transformers as mt

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
FRAMES = 4


def _segments(m: int) -> list:
    return [
        Text(tv.tokenize("look")),
        Image(grid=(1, 2 * m, 2 * m)),
        Text(tv.tokenize("then")),
        Video(grid=(FRAMES, 2 * m, 2 * m), fps=2.0),
        Text(tv.tokenize("what?")),
    ]


def _embeddings(net: torch.nn.Module, records: list[torch.Tensor]) -> torch.utils.hooks.RemovableHandle:
    """Record the input embeddings the text model receives (from the multimodal model; patch's own
    text-only probe hands it token ids)."""

    def hook(module, args, kwargs):  # noqa: ANN001, ANN202
        if kwargs.get("inputs_embeds") is not None:
            records.append(kwargs["inputs_embeds"].detach().clone())

    return net.model.language_model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("name", FAMILIES)
def test_pruned_video_gives_the_full_prompts_logits_without_the_dropped_tokens(name: str) -> None:
    net = tv.model(name)
    m = mt.model_rules(net).merge_size
    segments = _segments(m)
    full = tv.inputs(name, [segments])
    types = full["mm_token_type_ids"][0].numpy()
    per_frame = int((types == 2).sum()) // FRAMES
    rng = np.random.default_rng(11)
    mask = rng.random(FRAMES * per_frame) < 0.5
    mask[:per_frame], mask[per_frame : 2 * per_frame] = True, False  # first frame whole, the second gone
    keep = np.ones(types.size, dtype=bool)
    keep[types == 2] = mask
    # the reference: the unpatched model on the full prompt; no token attends a dropped one
    allowed = (
        torch.tril(torch.ones(types.size, types.size, dtype=torch.bool)) & torch.from_numpy(keep)[None, :]
    )
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    reference = {k: v for k, v in full.items() if k not in ("deltas", "attention_mask")}
    records: list[torch.Tensor] = []
    handle = _embeddings(net, records)
    try:
        net.model.rope_deltas = None
        with torch.no_grad():
            want = net(**{**reference, "attention_mask": additive}, use_cache=False).logits[0, keep]
        full_embeds = records.pop()[0]
        with tv.patched(net):
            records.clear()  # patch's own probe ran a forward
            got_inputs = mt.pruned_video_inputs(
                net,
                [segments],
                pixel_values_videos=full["pixel_values_videos"],
                pixel_values=full["pixel_values"],
                video_keep=lambda features, grids: [torch.from_numpy(mask)],
                tokenizer=tv.tokenize,
            )
            with torch.no_grad():
                got = net(**got_inputs, use_cache=False).logits[0]
                recount = dict(got_inputs, position_ids=torch.arange(got.shape[0]).expand(3, 1, -1))
                control = net(**recount, use_cache=False).logits[0]
    finally:
        handle.remove()
        net.model.rope_deltas = None
    pruned_embeds = records[0][0]
    torch.testing.assert_close(pruned_embeds, full_embeds[torch.from_numpy(keep)], rtol=0, atol=0)
    assert torch.equal(got_inputs["input_ids"][0], full["input_ids"][0][torch.from_numpy(keep)])
    torch.testing.assert_close(got, want, rtol=0, atol=2e-5)
    assert (control - want).abs().max() > 1e-3


def test_masks_must_fit_the_features() -> None:
    net = tv.model("qwen2-vl")
    segments = _segments(mt.model_rules(net).merge_size)
    full = tv.inputs("qwen2-vl", [segments])
    with pytest.raises(LayoutError, match="video_keep\\[0\\] must be a bool mask of the video's 16 features"):
        mt.pruned_video_inputs(
            net,
            [segments],
            pixel_values_videos=full["pixel_values_videos"],
            video_keep=[np.ones(15, dtype=bool)],
            tokenizer=tv.tokenize,
        )
    with pytest.raises(LayoutError, match="needs the samples' videos"):
        mt.pruned_video_inputs(
            net,
            [segments[:3]],
            pixel_values_videos=full["pixel_values_videos"],
            video_keep=[np.ones(1, bool)],
        )


def test_a_model_pruned_at_an_evs_rate_keeps_the_published_count_and_mask() -> None:
    """pruned_video_inputs(video_keep=evs_rule(q)): the kept placeholders are EVS's count, and the mask is
    EVS's on the model's own merged video features (computed here through the model's get_video_features)."""
    from mrope._pruning import evs_mask, evs_retained_tokens, evs_rule

    net = tv.model("qwen2-vl")
    m = mt.model_rules(net).merge_size
    segments = _segments(m)
    full = tv.inputs("qwen2-vl", [segments])
    grid = [int(v) for v in full["video_grid_thw"][0]]
    with torch.no_grad():
        feats = net.model.get_video_features(
            full["pixel_values_videos"], full["video_grid_thw"], return_dict=True
        )
    expected = evs_mask(feats.pooler_output[0], grid, m, 0.5)
    got = mt.pruned_video_inputs(
        net,
        [segments],
        pixel_values_videos=full["pixel_values_videos"],
        pixel_values=full["pixel_values"],
        video_keep=evs_rule(0.5),
        tokenizer=tv.tokenize,
    )
    dropped = full["input_ids"].shape[1] - got["input_ids"].shape[1]
    n = grid[0] * grid[1] * grid[2] // (m * m)
    assert dropped == n - evs_retained_tokens(grid, m, 0.5) > 0
    types = full["mm_token_type_ids"][0].numpy()
    keep = np.ones(types.size, dtype=bool)
    keep[types == 2] = expected.numpy()
    assert torch.equal(got["input_ids"][0], full["input_ids"][0][torch.from_numpy(keep)])
    with pytest.raises(LayoutError, match="pruning rate"):
        evs_rule(1.0)
