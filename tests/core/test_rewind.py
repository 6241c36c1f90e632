"""Rewind: a conversation that takes back its last ``k`` tokens (rejected draft tokens, a truncated turn,
a turn with a vision block) continues exactly as the whole conversation without them.

Expected values: each family's own transformers 5.24 ``get_rope_index`` (the tiny model's, rules read
from the model, ``convention="transformers5"``) on the whole conversation without the taken-back tokens,
the kept generated tokens in it as text. Negative control: the state after the taken-back tokens with
``k`` subtracted (what a rewind by arithmetic would keep) continues elsewhere after a vision block.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from support import tiny_vlm as tv
from support.hf_reference import own_get_rope_index

import mrope
from mrope import Image, LayoutError, Text, Video
from mrope.integrations import transformers as mt

FAMILIES = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v", "qwen2.5-omni"]
"""Qwen2-VL, Qwen2.5-VL (absolute time), Qwen3-VL (timestamps), GLM-4.1V (frame times) and an omni
family (time in 1/25 s)."""


def _parts(rules) -> tuple[list, list[int], list, list]:
    """A first turn, an answer, a second turn with a video between two texts, a third turn."""
    m = rules.merge_size
    video = (
        Video(grid=(4, 2 * m, 3 * m), second_per_grid=0.6)
        if rules.has_audio
        else Video(grid=(4, 2 * m, 3 * m), fps=2.0)
    )
    first = [Text(tv.tokenize("hello")), Image(grid=(1, 2 * m, 6 * m)), Text(tv.tokenize("what?"))]
    second = [Text(tv.tokenize("and this")), video, Text(tv.tokenize("ok, what happens next?"))]
    third = [Image(grid=(1, 2 * m, 2 * m)), Text(tv.tokenize("last"))]
    return first, tv.tokenize("a cat"), second, third


def _own(name: str, segments: list) -> tuple[np.ndarray, int]:
    """The family's own get_rope_index of one whole sequence: positions ``[A, T]`` and delta."""
    kw = tv.inputs(name, [segments], convention="transformers5", with_pixels=False)
    return own_get_rope_index(tv.model(name), kw)


def _continue(state, segments: list, rules):
    return mrope.continue_positions(state, segments, rules=rules, tokenizer=tv.tokenize)


@pytest.mark.parametrize("name", FAMILIES)
def test_rewind_continues_as_the_whole_conversation_without_the_tokens(name: str) -> None:
    rules = mt.model_rules(tv.model(name), "transformers5")
    first, answer, second, third = _parts(rules)
    drafts = 4  # rejected draft tokens after the answer, and after the second turn
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        start = mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize)
        # rejected drafts: only generated tokens come back
        state = mrope.rewind(start, drafts, generated=len(answer) + drafts)
        turn = _continue(state, second, rules)
        want, delta = _own(name, [*first, Text(answer), *second])
        a = turn.offset
        assert a == start.num_tokens + len(answer)
        assert np.array_equal(turn.positions.ids, want[:, a:]), name
        assert turn.state.delta == delta
        n = turn.positions.num_tokens
        video = next(s for s in turn.positions.spans if s.kind == "video")
        ends = [s.stop for s in turn.positions.spans if s.index == video.index]
        cuts = {
            "the text after the video": (max(ends), second[:2], [Text(tv.tokenize("so"))]),
            "the video and the text after it": (len(tv.tokenize("and")), [Text(tv.tokenize("and"))], third),
            "the whole turn": (0, [], third),
        }
        for what, (keep, kept_segments, rest) in cuts.items():
            kept = mrope.rewind(turn, n - keep + drafts, generated=drafts)
            again = _continue(kept, rest, rules)
            want, delta = _own(name, [*first, Text(answer), *kept_segments, *rest])
            b = again.offset
            assert np.array_equal(again.positions.ids, want[:, b:]), (name, what)
            assert again.state.delta == delta and again.state.num_tokens == want.shape[1], (name, what)
            # the state itself: decode after the rewind continues as the remainder's own delta says
            _, own_delta = _own(name, [*first, Text(answer), *kept_segments])
            assert kept.delta == own_delta, (name, what)
            naive = replace(turn.state, num_tokens=a + keep, next_start=turn.state.next_start - (n - keep))
            assert naive.delta != own_delta, (name, what)  # negative control: rewinding by arithmetic
        # the whole conversation's positions rewind the same way
        whole = mrope.build_positions([*first, Text(answer), *second], rules=rules, tokenizer=tv.tokenize)
        assert mrope.rewind(whole, n) == mrope.conversation_state(
            mrope.build_positions([*first, Text(answer)], rules=rules, tokenizer=tv.tokenize)
        )


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl"])
def test_rewind_into_a_vision_block_is_refused(name: str) -> None:
    rules = mt.model_rules(tv.model(name), "transformers5")
    first, answer, second, _ = _parts(rules)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        turn = _continue(mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize), second, rules)
    n = turn.positions.num_tokens
    members = [s for s in turn.positions.spans if s.index == 1]
    a, b = members[0].start, members[-1].stop
    for keep in (a + 1, (a + b) // 2, b - 1):
        with pytest.raises(LayoutError, match=rf"middle of segment 1 .*k={n - a} .*k={n - b}"):
            mrope.rewind(turn, n - keep)
    mrope.rewind(turn, n - a)  # the segment's edges are exact
    mrope.rewind(turn, n - b)
    with pytest.raises(LayoutError, match="rewind from an earlier turn"):
        mrope.rewind(turn, n + 3, generated=2)
    for bad in (-1, 1.0, True):
        with pytest.raises(LayoutError, match="k must be an int"):
            mrope.rewind(turn, bad)


@pytest.mark.parametrize("convention", ["released", "transformers5"])
def test_every_family_rewinds_to_the_state_of_what_remains(convention: str) -> None:
    """For every family of the registry: rewinding the whole positions to each segment boundary and
    into each text run gives the state of the remaining segments built at once (``mrope.build_positions``,
    itself checked against transformers in tests/models), and a turn continued from it equals theirs."""
    from mrope.models import names, resolve_rules

    ids = {"slice_start_id": 248060, "slice_end_id": 248061, "newline_id": 198}
    for name in names():
        rules = resolve_rules(name, ids if name == "minicpm-v-4.7" else None, convention)
        if rules.generates_images:
            continue
        m = rules.merge_size
        media = Image(grid=(1, 2 * m, 3 * m))
        if rules.video_support != "none":
            media = Video(grid=(2 * rules.temporal_merge_size, 2 * m, 2 * m), fps=2.0)
        segs = [Text(tv.tokenize("hello")), Image(grid=(1, 2 * m, 4 * m)), Text(tv.tokenize("and")), media]
        segs.append(Text(tv.tokenize("a long question?")))
        more = [Image(grid=(1, 2 * m, 2 * m)), Text(tv.tokenize("ok"))]

        def build(parts: list, rules=rules) -> mrope.Positions:
            return mrope.build_positions(parts, rules=rules, tokenizer=tv.tokenize)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mrope.MRopeWarning)
            whole = build(segs)
            for cut in range(1, len(segs)):
                after = segs[cut]
                inside = [[Text(after.token_ids[:2])]] if isinstance(after, Text) else []
                for extra in ([], *inside):  # at the boundary, and inside the text after it
                    kept = build([*segs[:cut], *extra])
                    if rules.advance == "spatial" and kept.spans[-1].kind not in (
                        "text",
                        "wrapper",
                        "timestamp",
                    ):
                        continue  # refused: the counter after a block is not in its positions
                    state = mrope.rewind(whole, whole.num_tokens - kept.num_tokens)
                    assert state == mrope.conversation_state(kept), (name, cut, extra)
                    turn = mrope.continue_positions(state, more, rules=rules, tokenizer=tv.tokenize)
                    again = build([*segs[:cut], *extra, *more])
                    assert np.array_equal(turn.positions.ids, again.ids[:, kept.num_tokens :]), (name, cut)
