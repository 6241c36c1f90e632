"""A patched tiny model that prefills a turn, takes it back (its KV cache cropped, the state rewound
with ``mrope.rewind``) and continues with another gives the logits of the whole conversation without the
taken-back turn, as the unpatched model computes them with its own ``get_rope_index`` (< 1e-4).

The taken-back turn holds a video, so the rewind crosses a vision block. Prompts carry no pixels (the
placeholders keep their token embeddings): the positions and the rotation are what is under test.
Negative control: continuing from the state after the taken-back turn (no rewind) moves the logits.
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


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl"])
def test_decoding_after_a_rewind_gives_the_whole_conversation_logits(name: str) -> None:
    net = tv.model(name)
    rules = mt.model_rules(net, "transformers5")
    m = rules.merge_size
    first = [Text(tv.tokenize("hi")), Image(grid=(1, 2 * m, 4 * m)), Text(tv.tokenize("what?"))]
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
    assert (
        moved - want[n1:b]
    ).abs().max() > 1e-3  # ten times the tolerance (a tiny random model: small logits)
