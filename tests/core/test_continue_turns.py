"""Continued conversations: a turn appended with ``mrope.continue_positions`` equals the tail of the
whole conversation's positions, and positions of a prefix do not change with what follows.

Expected values: each family's own transformers 5.24 ``get_rope_index`` (the tiny model's position
owner, rules read from the model, ``convention="transformers5"``) on the whole conversation, the
generated tokens in it as text; for the registry-wide check, ``mrope.build_positions`` of the whole
conversation (itself checked against transformers in tests/models and tests/integrations).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv

import mrope
from mrope import Audio, Image, LayoutError, Text, Video
from mrope._continuation import ConversationState, continue_positions, conversation_state
from mrope.integrations import transformers as mt
from mrope.integrations.transformers._discovery import position_owners
from mrope.integrations.transformers._inputs import named_for
from mrope.integrations.transformers._probes import restore_attributes
from mrope.models import names, resolve_rules

CANVAS_IDS = {"slice_start_id": 248060, "slice_end_id": 248061, "newline_id": 198}
"""MiniCPM-V 4.7's marker ids where no checkpoint gives them (the rules only compare ids)."""


def _turns(rules, *, images_only: bool = False) -> tuple[list, list, list, list, list]:
    """Three turns and two answers: images, a video, timestamps where the family has them, audio for
    omni rules (a fractional second_per_grid), images only for sequence rules and image-only models."""
    m = rules.merge_size
    images_only = images_only or rules.positions_base == "sequence" or rules.video_support == "none"
    video = (
        Video(grid=(4, 2 * m, 4 * m), second_per_grid=0.6)
        if rules.has_audio
        else Video(grid=(4, 2 * m, 4 * m), fps=2.0)
    )
    middle = Image(grid=(1, 4 * m, 2 * m)) if images_only else video
    second = [Text(tv.tokenize("and this")), middle, Text(tv.tokenize("?"))]
    if rules.has_audio:
        second.insert(1, Audio(mel_frames=230))
    return (
        [Text(tv.tokenize("hello")), Image(grid=(1, 2 * m, 6 * m)), Text(tv.tokenize("what is it?"))],
        tv.tokenize("a cat"),
        second,
        tv.tokenize("ok!"),
        [Image(grid=(1, 2 * m, 2 * m)), Text(tv.tokenize("last"))],
    )


def _transformers_positions(net, rules, segments: list, mel: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions [A, L], input_ids [L])`` of one sequence by the model's own get_rope_index."""
    batch = mrope.build_batch([segments], rules=rules, tokenizer=tv.tokenize, pad_token_id=0)
    kw = mt.model_inputs(batch, net)
    owner, _ = position_owners(net)
    fn = type(owner).get_rope_index
    before = dict(owner.__dict__)
    try:
        with torch.no_grad():
            if rules.has_audio:
                args = {k: kw[k] for k in ("image_grid_thw", "video_grid_thw", "attention_mask") if k in kw}
                seconds = kw.get("video_second_per_grid", kw.get("second_per_grid_ts"))
                if seconds is not None:
                    args["second_per_grids"] = seconds.float()
                pos = fn(owner, kw["input_ids"], **args, audio_seqlens=torch.tensor(mel) if mel else None)[0]
            else:
                pos = fn(owner, **named_for(fn, kw))[0]
    finally:
        restore_attributes(owner, before)
    return pos[:, 0], kw["input_ids"][0]


FAMILIES = [*tv.FAMILIES, "hunyuan-ocr"]


@pytest.mark.parametrize("name", FAMILIES)
def test_continued_turns_are_the_tail_of_the_whole_conversation_by_transformers(name: str) -> None:
    net = tv.model(name)
    rules = mt.model_rules(net, "transformers5")
    first, answer, second, answer2, third = _turns(rules, images_only=name in tv.NO_VIDEO)
    mel = [230] if rules.has_audio else []
    whole = first + [Text(answer)] + second + [Text(answer2)] + third
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        want, want_ids = _transformers_positions(net, rules, whole, mel)
        alone, _ = _transformers_positions(net, rules, first, [])
        start = mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize)
        turn = continue_positions(start, second, generated=len(answer), tokenizer=tv.tokenize)
        wire = json.loads(json.dumps(turn.state.to_dict()))
        last = continue_positions(
            ConversationState.from_dict(wire),
            third,
            generated=len(answer2),
            rules=rules,
            tokenizer=tv.tokenize,
        )
        control = continue_positions(start, second, tokenizer=tv.tokenize)  # the answer forgotten
    n1 = start.num_tokens
    assert torch.equal(want[:, :n1], alone)  # transformers: a prefix's positions do not change
    assert np.array_equal(start.ids, alone.numpy())
    for part in (turn, last):
        a, b = part.offset, part.offset + part.positions.num_tokens
        got = torch.from_numpy(part.positions.ids)
        assert torch.equal(got, want[:, a:b].to(got.dtype)), (a, got, want[:, a:b])
        assert torch.equal(torch.from_numpy(part.positions.input_ids), want_ids[a:b])
    assert turn.offset == n1 + len(answer) and last.offset + last.positions.num_tokens == want.shape[1]
    assert not np.array_equal(control.positions.ids, turn.positions.ids)


def _registry_turns(rules) -> list[list]:
    if rules.positions_base == "canvas":
        return [list(t) for t in _turns(rules)[::2]]
    turns = [list(t) for t in _turns(rules)[::2]]
    if rules.has_audio and rules.video_support != "none":  # and a video with its own audio
        m = rules.merge_size
        turns[2].insert(0, Video(grid=(6, 2 * m, 2 * m), second_per_grid=0.7, audio=Audio(mel_frames=410)))
    return turns


@pytest.mark.parametrize("convention", ["released", "transformers5"])
def test_every_family_continues_as_the_whole_conversation_builds(convention: str) -> None:
    """For every family of the registry: every turn continued from the state (JSON round trip) equals
    the whole conversation's tail; every prefix's positions equal the whole's head; deltas agree."""
    for name in names():
        rules = resolve_rules(name, CANVAS_IDS if name == "minicpm-v-4.7" else None, convention)
        turns = _registry_turns(rules)
        answers = [tv.tokenize("yes"), tv.tokenize("no way")]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mrope.MRopeWarning)
            segs = turns[0] + [Text(answers[0])] + turns[1] + [Text(answers[1])] + turns[2]
            whole = mrope.build_positions(segs, rules=rules, tokenizer=tv.tokenize)
            previous = mrope.build_positions(turns[0], rules=rules, tokenizer=tv.tokenize)
            assert np.array_equal(previous.ids, whole.ids[:, : previous.num_tokens]), name
            state = conversation_state(previous)
            for turn, answer in zip(turns[1:], answers, strict=True):
                state = ConversationState.from_dict(json.loads(json.dumps(state.to_dict())))
                out = continue_positions(
                    state, turn, generated=len(answer), rules=rules, tokenizer=tv.tokenize
                )
                a, b = out.offset, out.offset + out.positions.num_tokens
                assert np.array_equal(out.positions.ids, whole.ids[:, a:b]), (name, a)
                assert out.positions.ids.dtype == whole.ids.dtype
                assert np.array_equal(out.positions.input_ids, whole.input_ids[a:b]), name
                assert [s.kind for s in out.positions.spans][-1] == "text"
                state = out.state
        assert state.num_tokens == whole.num_tokens, name
        if rules.generates_images:  # GLM-Image keeps delta 0 (its decode positions are planned)
            assert out.positions.delta == whole.delta == 0
        else:
            assert state.delta == whole.delta, name
            assert out.positions.window(b - a, b - a + 2).tolist() == whole.window(b, b + 2).tolist(), name


def test_fractional_time_state_and_refusals() -> None:
    rules = resolve_rules("qwen3-omni")
    video = Video(grid=(3, 4, 4), second_per_grid=0.37, audio=Audio(mel_frames=40))
    first = mrope.build_positions([Text(3), video, Text(2)], model="qwen3-omni")
    state = conversation_state(first)
    assert isinstance(state.next_start, float) and state.next_start != int(state.next_start)
    with pytest.raises(LayoutError, match="built under the 'qwen3-omni' rules"):
        continue_positions(state, [Text(2)], model="qwen2-vl")
    with pytest.raises(LayoutError, match="needs model="):
        continue_positions(state, [Text(2)])
    with pytest.raises(LayoutError, match="generated must be an int >= 0"):
        continue_positions(first, [Text(2)], generated=-1)
    with pytest.raises(LayoutError, match="has the fields"):
        ConversationState.from_dict({"rules": "x"})
    with pytest.raises(LayoutError, match="top must be a finite number"):
        ConversationState.from_dict({**state.to_dict(), "top": float("inf")})
    with pytest.raises(LayoutError, match="fractional"):
        continue_positions(
            ConversationState.from_dict({**state.to_dict(), "next_start": 3}), [Text(1)], rules=rules
        )
    glm = mrope.build_positions([Text(3), Image((1, 4, 4), generate=True)], model="glm-image")
    with pytest.raises(LayoutError, match="images to generate"):
        conversation_state(glm)
    released = mrope.build_positions([Text(3), Image((1, 4, 8))], model="qwen2-vl")
    with pytest.raises(LayoutError, match="other 'qwen2-vl' rules"):
        continue_positions(released, [Text(2)], model="qwen2-vl", convention="transformers5")
    spatial = mrope.build_positions(
        [Text(3), Image((1, 4, 8), wrap=False)], model="qwen2-vl", convention="transformers5"
    )
    with pytest.raises(LayoutError, match="spatial advance"):
        conversation_state(spatial)
