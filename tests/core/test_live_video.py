"""Live video: temporal groups that arrive in chunks get the positions (and Qwen3-VL / GLM timestamp
tokens) the whole video built at once gives them, and the conversation continues after the video as
after the whole one.

Expected values: each family's own transformers 5.24 ``get_rope_index`` (tiny model, rules read from
the model, ``convention="transformers5"``) on the whole conversation with the whole video. Negative
control: each chunk built as a video of its own, continued from the running state.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from support import tiny_vlm as tv
from support.hf_reference import own_get_rope_index

import mrope
from mrope import Image, LayoutError, Text, Video
from mrope.integrations import transformers as mt

FAMILIES = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v", "qwen2.5-omni"]
ARRIVALS = (1, 2, 3)
"""Temporal groups per chunk (6 in all)."""


def _video(rules, groups: int) -> Video:
    m = rules.merge_size
    if rules.has_audio:
        return Video(grid=(groups, 2 * m, 3 * m), second_per_grid=0.6)
    return Video(grid=(groups, 2 * m, 3 * m), fps=2.0)


@pytest.mark.parametrize("name", FAMILIES)
def test_live_groups_get_the_whole_video_positions(name: str) -> None:
    net = tv.model(name)
    rules = mt.model_rules(net, "transformers5")
    m = rules.merge_size
    first = [Text(tv.tokenize("hi")), Image(grid=(1, 2 * m, 4 * m)), Text(tv.tokenize("watch"))]
    after = [Text(tv.tokenize("what happened?"))]
    total = sum(ARRIVALS)
    kw = tv.inputs(
        name, [[*first, _video(rules, total), *after]], convention="transformers5", with_pixels=False
    )
    want, delta = own_get_rope_index(net, kw)
    want_ids = kw["input_ids"][0].numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        start = mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize)
        chunks, arrived, running = [], 0, mrope.conversation_state(start)
        own = []
        for i, new in enumerate(ARRIVALS):
            video = _video(rules, arrived + new)
            chunks.append(
                mrope.live_video_chunk(
                    start, video, arrived, final=i == len(ARRIVALS) - 1, tokenizer=tv.tokenize
                )
            )
            alone = mrope.continue_positions(
                running, [_video(rules, new)], rules=rules, tokenizer=tv.tokenize
            )
            own.append((alone.positions.ids, alone.positions.input_ids))
            running, arrived = alone.state, arrived + new
        tail = mrope.continue_positions(chunks[-1].state, after, rules=rules, tokenizer=tv.tokenize)
    at = start.num_tokens
    for chunk in chunks:
        n = chunk.ids.shape[1]
        assert chunk.offset == at and n, name
        assert np.array_equal(chunk.ids, want[:, at : at + n]), (name, at)
        assert np.array_equal(chunk.input_ids, want_ids[at : at + n]), (name, at)
        assert all(c.state is None for c in chunks[:-1])
        at += n
    assert np.array_equal(tail.positions.ids, want[:, at:]) and tail.offset == at, name
    assert tail.state.delta == delta and tail.state.num_tokens == want.shape[1]
    # negative control: chunks built as videos of their own restart time at each chunk (t, or the
    # timestamps' text) and rewrap each chunk
    ids = np.concatenate([o[0] for o in own], axis=1)
    tokens = np.concatenate([o[1] for o in own])
    same_ids = np.array_equal(ids, want[:, start.num_tokens : at])
    assert not (same_ids and np.array_equal(tokens, want_ids[start.num_tokens : at])), name


def test_live_video_refusals() -> None:
    rules = mt.model_rules(tv.model("qwen2-vl"), "transformers5")
    start = mrope.build_positions([Text(tv.tokenize("hi"))], rules=rules)
    for arrived in (-1, 3, True):
        with pytest.raises(LayoutError, match="arrived must be an int"):
            mrope.live_video_chunk(start, Video(grid=(3, 4, 4), fps=2.0), arrived)
    with pytest.raises(LayoutError, match="timed by its rate"):
        mrope.live_video_chunk(start, Video(grid=(2, 4, 4), frame_times=(0.0, 0.5, 1.0, 1.5)), 0)
    with pytest.raises(LayoutError, match="a live video is a mrope.Video"):
        mrope.live_video_chunk(start, Image(grid=(1, 4, 4)), 0)


@pytest.mark.parametrize("convention", ["released", "transformers5"])
def test_every_family_with_video_streams_it_as_the_whole_video_builds(convention: str) -> None:
    """For every family of the registry with video (the whole video's positions by
    ``mrope.build_positions``, itself checked against transformers in tests/models)."""
    from mrope.models import names, resolve_rules

    for name in names():
        ids = {"slice_start_id": 248060, "slice_end_id": 248061, "newline_id": 198}
        rules = resolve_rules(name, ids if name == "minicpm-v-4.7" else None, convention)
        if rules.video_support == "none":
            continue
        first = [Text(tv.tokenize("hi")), Image(grid=(1, 2 * rules.merge_size, 2 * rules.merge_size))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mrope.MRopeWarning)
            step = rules.temporal_merge_size
            whole = mrope.build_positions(
                [*first, _video(rules, 5 * step), Text(tv.tokenize("so"))], rules=rules, tokenizer=tv.tokenize
            )
            start = mrope.build_positions([*first, Text(tv.tokenize(""))], rules=rules, tokenizer=tv.tokenize)
            chunks = [
                mrope.live_video_chunk(
                    start, _video(rules, b * step), a * step, final=b == 5, rules=rules, tokenizer=tv.tokenize
                )
                for a, b in ((0, 1), (1, 3), (3, 5))
            ]
            tail = mrope.continue_positions(chunks[-1].state, [Text(tv.tokenize("so"))], rules=rules)
        got = np.concatenate([*(c.ids for c in chunks), tail.positions.ids], axis=1)
        assert np.array_equal(got, whole.ids[:, start.num_tokens :]), (name, convention)
        tokens = np.concatenate([*(c.input_ids for c in chunks), tail.positions.input_ids])
        assert np.array_equal(tokens, whole.input_ids[start.num_tokens :]), (name, convention)
