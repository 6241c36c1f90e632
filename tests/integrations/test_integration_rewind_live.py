"""A patched tiny model fed through its KV cache gives the logits of the whole conversation, as the
unpatched model computes them with its own ``get_rope_index`` (< 1e-4):

- after a rewind: it prefills a turn, takes it back (the cache cropped, the state rewound with
  ``mrope.rewind``) and continues with another; the taken-back turn holds a video, so the rewind crosses
  a vision block. Control: continuing from the state after the taken-back turn moves the logits.
- with a live video: the video's temporal groups arrive in chunks (``mrope.live_video_chunk``), then
  text. Control: each chunk fed as a video of its own moves the logits.

Prompts carry no pixels (the placeholders keep their token embeddings): the positions and the rotation
are what is under test.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from support import tiny_vlm as tv

import mrope
from mrope import Image, Text, Video
from mrope.integrations import transformers as mt


def _step(net, input_ids: list[int], positions, cache):
    """One forward of ``input_ids`` at ``positions`` ``[A, n]`` after ``cache``: (logits ``[n, V]``, cache)."""
    out = net(
        input_ids=torch.tensor([input_ids]),
        position_ids=torch.from_numpy(positions)[:, None, :],
        cache=cache,
        use_cache=True,
    )
    return out.logits[0], out.cache


def _opening(name: str, ask: str) -> tuple:
    """The tiny model, its transformers 5.24 rules, their merge size and a first turn asking ``ask``."""
    net = tv.model(name)
    rules = mt.model_rules(net, "transformers5")
    m = rules.merge_size
    return net, rules, m, [Text(tv.tokenize("hi")), Image(grid=(1, 2 * m, 4 * m)), Text(tv.tokenize(ask))]


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl"])
def test_decoding_after_a_rewind_gives_the_whole_conversation_logits(name: str) -> None:
    net, rules, m, first = _opening(name, "what?")
    answer = tv.tokenize("a dog")
    taken_back = [
        Text(tv.tokenize("and")),
        Video(grid=(4, 2 * m, 2 * m), fps=2.0),
        Text(tv.tokenize("then?")),
    ]
    third = [Text(tv.tokenize("no, tell me more"))]
    nxt = tv.tokenize("!")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        want = tv.logits(
            name, tv.inputs(name, [[*first, Text(answer), *third, Text(nxt)]], with_pixels=False)
        )[0]
        start = mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize)
        turn = mrope.continue_positions(start, taken_back, generated=len(answer), tokenizer=tv.tokenize)
        state = mrope.rewind(turn, turn.positions.num_tokens)
        after = mrope.continue_positions(state, third, rules=rules, tokenizer=tv.tokenize)
        control = mrope.continue_positions(turn, third, tokenizer=tv.tokenize)
    n0, n1 = start.num_tokens, turn.offset
    with tv.patched(net), torch.no_grad():
        _, cache = _step(net, start.input_ids.tolist(), start.ids, None)
        _, cache = _step(net, answer, start.window(n0, n1), cache)
        _, cache = _step(net, turn.positions.input_ids.tolist(), turn.positions.ids, cache)
        cache.crop(n1 - cache.get_seq_length())  # the engine drops the turn's keys (crop takes a count)
        got, cache = _step(net, after.positions.input_ids.tolist(), after.positions.ids, cache)
        decoded = after.state.num_tokens
        last, _ = _step(net, nxt, mrope.next_positions(after.state.delta, decoded, 1), cache)
        cache.crop(n1 - cache.get_seq_length())
        moved, _ = _step(net, control.positions.input_ids.tolist(), control.positions.ids, cache)
    b = n1 + after.positions.num_tokens
    torch.testing.assert_close(got, want[n1:b], atol=1e-4, rtol=0)
    torch.testing.assert_close(last, want[b:], atol=1e-4, rtol=0)
    gap = (moved - want[n1:b]).abs().max()
    assert gap > 1e-3  # ten times the tolerance (a tiny random model: small logits)


@pytest.mark.parametrize("name", ["qwen2.5-vl", "qwen3-vl"])
def test_decoding_after_live_video_chunks_gives_the_whole_video_logits(name: str) -> None:
    net, rules, m, first = _opening(name, "watch")
    after = [Text(tv.tokenize("what happened?"))]
    arrivals = (2, 1, 3)

    def video(groups: int) -> Video:
        return Video(grid=(groups, 2 * m, 2 * m), fps=2.0)

    whole = [*first, video(sum(arrivals)), *after]
    want = tv.logits(name, tv.inputs(name, [whole], convention="transformers5", with_pixels=False))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        start = mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize)
        chunks, arrived, running, own = [], 0, mrope.conversation_state(start), []
        for i, new in enumerate(arrivals):
            final = i == len(arrivals) - 1
            chunks.append(
                mrope.live_video_chunk(
                    start, video(arrived + new), arrived, final=final, tokenizer=tv.tokenize
                )
            )
            alone = mrope.continue_positions(running, [video(new)], rules=rules, tokenizer=tv.tokenize)
            own.append(alone.positions)
            running, arrived = alone.state, arrived + new
        tail = mrope.continue_positions(chunks[-1].state, after, rules=rules, tokenizer=tv.tokenize)
        own.append(mrope.continue_positions(running, after, rules=rules, tokenizer=tv.tokenize).positions)
    n0 = start.num_tokens
    with tv.patched(net), torch.no_grad():
        _, cache = _step(net, start.input_ids.tolist(), start.ids, None)
        got = []
        for chunk in chunks:
            out, cache = _step(net, chunk.input_ids.tolist(), chunk.ids, cache)
            got.append(out)
        out, _ = _step(net, tail.positions.input_ids.tolist(), tail.positions.ids, cache)
        got.append(out)
        _, cache = _step(net, start.input_ids.tolist(), start.ids, None)
        for alone in own:
            moved, cache = _step(net, alone.input_ids.tolist(), alone.ids, cache)
    torch.testing.assert_close(torch.cat(got), want[n0:], atol=1e-4, rtol=0)
    # the text after the video, read after chunks fed as videos of their own (the ends align)
    assert (moved - want[-moved.shape[0] :]).abs().max() > 1e-3  # ten times the tolerance


def test_evicted_frames_keep_the_positions_of_the_survivors() -> None:
    """Qwen2.5-VL: the first chunk's groups are evicted from the cache before the next chunks; the
    later tokens' logits equal the whole conversation's with the evicted tokens masked out (attention
    mask, mrope's whole positions, the unpatched model). Control: the later chunks laid out as a video
    without the evicted groups moves the logits."""
    name = "qwen2.5-vl"
    net = tv.model(name)
    rules = mt.model_rules(net, "transformers5")
    m = rules.merge_size
    first = [Text(tv.tokenize("watch"))]

    def video(groups: int) -> Video:
        return Video(grid=(groups, 2 * m, 2 * m), fps=2.0)

    kw = tv.inputs(
        name, [[*first, video(5), Text(tv.tokenize("so?"))]], convention="transformers5", with_pixels=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        start = mrope.build_positions(first, rules=rules, tokenizer=tv.tokenize)
        one = mrope.live_video_chunk(start, video(2), 0)
        two = mrope.live_video_chunk(start, video(5), 2, final=True)
        tail = mrope.continue_positions(
            two.state, [Text(tv.tokenize("so?"))], rules=rules, tokenizer=tv.tokenize
        )
        shifted = mrope.live_video_chunk(start, video(3), 0, final=True)  # as if the groups were never sent
    n0, a = start.num_tokens, one.offset + 1  # the opening wrapper stays; the 2 groups' tokens go
    b = one.offset + one.ids.shape[1]
    mask = kw["attention_mask"].clone()
    mask[0, a:b] = 0
    kw["attention_mask"] = mask
    want = tv.logits(name, kw, own_positions=False)[0][b:]
    with tv.patched(net), torch.no_grad():
        _, cache = _step(net, start.input_ids.tolist(), start.ids, None)
        _, cache = _step(net, one.input_ids.tolist(), one.ids, cache)
        kept = torch.tensor([*range(a), *range(b, cache.get_seq_length())])
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys[:, :, kept], layer.values[:, :, kept]
        got2, cache = _step(net, two.input_ids.tolist(), two.ids, cache)
        got3, _ = _step(net, tail.positions.input_ids.tolist(), tail.positions.ids, cache)
        _, cache = _step(net, start.input_ids.tolist(), start.ids, None)
        _, cache = _step(net, shifted.input_ids[:1].tolist(), shifted.ids[:, :1], cache)
        moved, _ = _step(net, shifted.input_ids[1:].tolist(), shifted.ids[:, 1:], cache)
    assert n0 < a < b
    torch.testing.assert_close(torch.cat([got2, got3]), want, atol=1e-4, rtol=0)
    assert (moved - want[: moved.shape[0]]).abs().max() > 1e-3  # ten times the tolerance
